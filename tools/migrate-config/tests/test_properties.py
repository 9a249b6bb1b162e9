"""Property tests: idempotence, and every input key is kept, moved/dropped by a named rule, or reported."""

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl_migrate import migrate_yaml_text, translate_overrides, yaml_io
from verl_migrate.errors import ConflictError
from verl_migrate.keys import is_head_key, old_defaults
from verl_migrate.report import FileReport
from verl_migrate.yamldoc import YamlDoc

OLD = sorted(old_defaults())
PARENTS = ["trainer", "x_team", "actor_rollout_ref.rollout", "actor_rollout_ref.rollout.extra_configs", "reward"]
VALUES = st.one_of(
    st.integers(-3, 300).map(str),
    st.sampled_from(
        ["abc", "true", "false", "null", "flow_grpo", "visual", "vanilla", "single_turn_agent", "[0, 5]", "{}"]
    ),
)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def flat_configs(draw) -> dict[str, str]:
    keys = draw(st.lists(st.sampled_from(OLD), unique=True, max_size=30))
    items = {k: draw(st.one_of(st.just(old_defaults()[k] or "null"), VALUES)) for k in keys}
    for parent, name in draw(
        st.lists(st.tuples(st.sampled_from(PARENTS), st.from_regex(r"x_[a-z]{1,5}", fullmatch=True)), max_size=4)
    ):
        items[f"{parent}.{name}"] = draw(VALUES)
    out: dict[str, str] = {}
    for k in sorted(items):  # a key may not be both a value and a mapping
        if not any(k.startswith(o + ".") or o.startswith(k + ".") for o in out):
            out[k] = items[k]
    return out


def to_yaml(flat: dict[str, str]) -> str:
    tree: dict = {}
    for key, value in flat.items():
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    lines: list[str] = []

    def emit(node: dict, ind: int) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                lines.append(" " * ind + f"{k}:")
                emit(v, ind + 2)
            else:
                lines.append(" " * ind + f"{k}: {v}")

    emit(tree, 0)
    return "\n".join(lines) + "\n" if lines else "{}\n"


def _conflict_names_input_keys(err: ConflictError, flat: dict[str, str]) -> bool:
    named = re.findall(r"`([\w.]+)`", err.message)
    return any(n in flat or any(k.startswith(n + ".") for k in flat) for n in named[:1])


@SETTINGS
@given(flat_configs())
def test_yaml_migration_is_idempotent(flat: dict[str, str]) -> None:
    try:
        once, _ = migrate_yaml_text(to_yaml(flat))
    except ConflictError as e:
        assert _conflict_names_input_keys(e, flat)
        return
    twice, report = migrate_yaml_text(once)
    assert twice == once
    assert report.changes == []


@SETTINGS
@given(flat_configs())
def test_every_yaml_key_is_kept_moved_or_reported(flat: dict[str, str]) -> None:
    try:
        out, report = migrate_yaml_text(to_yaml(flat))
    except ConflictError:
        return
    data = yaml_io.load(out, "out")
    leaves = set(YamlDoc(data, FileReport("out")).leaves()) if isinstance(data, dict) else set()
    changed = {c.path for c in report.changes}
    found = {f.path for f in report.findings if f.category in ("unknown", "obsolete")}
    for key in flat:
        kept = key in leaves
        assert kept or key in changed or any(c.startswith(key + ".") for c in changed), f"{key} vanished"
        if kept and not is_head_key(key):
            assert key in found, f"{key} kept but not reported"


@SETTINGS
@given(flat_configs(), st.lists(st.sampled_from(["", "+"]), min_size=40, max_size=40))
def test_overrides_idempotent_and_accounted(flat: dict[str, str], prefixes: list[str]) -> None:
    words = [f"{p}{k}={v.replace(' ', '')}" for (k, v), p in zip(flat.items(), prefixes)]
    try:
        once = translate_overrides(words)
    except ConflictError:
        return
    twice = translate_overrides(once.overrides)
    assert twice.overrides == once.overrides and not twice.changed
    out_keys = {w.lstrip("+~").split("=", 1)[0] for w in once.overrides}
    changed = {c.path for c in once.report.changes}
    found = {f.path for f in once.report.findings}
    for key in flat:
        assert key in out_keys or key in changed, f"{key} vanished"
        if key in out_keys and not is_head_key(key):
            assert key in found, f"{key} kept but not reported"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flat_configs(), st.booleans(), st.booleans())
def test_scripts_stay_valid_and_match_translate_overrides(flat: dict[str, str], one_per_line: bool, tail: bool) -> None:
    import shlex
    import shutil
    import subprocess

    from verl_migrate import migrate_script_text
    from verl_migrate.script import commands

    words = [shlex.quote(f"{k}={v}") for k, v in flat.items()] + (['"$@"'] if tail else [])
    sep = " \\\n    " if one_per_line else " "
    text = "set -e\npython3 -m verl.trainer.main_flowgrpo" + "".join(sep + w for w in words) + "\necho done\n"
    try:
        out, _ = migrate_script_text(text, "run.sh")
        expected = translate_overrides(commands(text, "run.sh")[0]).overrides
    except ConflictError:
        return
    # same overrides; new ones may sit before `"$@"` / the last line in the script but last in the list
    assert sorted(commands(out, "run.sh")[0]) == sorted(expected)
    assert out.endswith("\necho done\n")
    if shutil.which("bash"):
        subprocess.run(["bash", "-n"], input=out, text=True, check=True, timeout=60)
