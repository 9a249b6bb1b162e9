"""One `noop` and one `rewrite` case per registered rule id (pytest id = rule id); the rewrite is idempotent and
its expected output loads and validates against verl-omni's key tree."""

import pytest
from verl_migrate_cases import Case, all_cases

from verl_migrate import migrate_script_text, migrate_yaml_text, translate_overrides, yaml_io
from verl_migrate.report import FileReport
from verl_migrate.rules import all_rules
from verl_migrate.validate import check_keys
from verl_migrate.yamldoc import YamlDoc

CASES = all_cases()


def _run(case: Case, which: str) -> tuple[str | list[str], FileReport]:
    from verl_migrate.upstream import pinned

    with pinned(case.target):
        return _run_pinned(case, which)


def _run_pinned(case: Case, which: str) -> tuple[str | list[str], FileReport]:
    only = [case.rule_id]
    if case.fmt == "yaml":
        return migrate_yaml_text(case.text(which), only=only)
    if case.fmt == "script":
        return migrate_script_text(case.text(which), only=only)
    res = translate_overrides(case.words(which), only=only)
    return res.overrides, res.report


def _expected(case: Case, which: str):
    return case.words(which) if case.fmt == "overrides" else case.text(which)


def _validate(case: Case) -> list:
    from verl_migrate.upstream import pinned

    with pinned(case.target):
        return _validate_pinned(case)


def _validate_pinned(case: Case) -> list:
    report = FileReport("<expected>")
    if case.fmt == "yaml":
        data = yaml_io.load(case.text("after"), "<expected>")
        doc = YamlDoc(data, FileReport("<expected>"))
        check_keys([(p, doc.get(p), None) for p in doc.leaves()], report)
    elif case.fmt == "overrides":
        from verl_migrate.overridedoc import parse_override

        entries = [parse_override(w) for w in case.words("after")]
        check_keys([(e.key, e.value, e.prefix) for e in entries if e.is_config], report)
    return [f for f in report.findings if f.category == "error"]


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "rewrite"], ids=lambda c: c.rule_id)
def test_rule_rewrite(case: Case) -> None:
    out, report = _run(case, "before")
    assert out == _expected(case, "after")
    if case.finding:
        assert any(f.rule_id == case.rule_id and f.category == case.finding for f in report.findings)
    else:
        assert {c.rule_id for c in report.changes} == {case.rule_id}
    again, report2 = _run(case, "after")
    assert again == _expected(case, "after"), "not idempotent"
    assert not [c for c in report2.changes if c.rule_id == case.rule_id]
    assert _validate(case) == []


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "noop"], ids=lambda c: c.rule_id)
def test_rule_noop(case: Case) -> None:
    out, report = _run(case, "before")
    assert out == _expected(case, "before")
    assert not [c for c in report.changes if c.rule_id == case.rule_id]
    assert not [f for f in report.findings if f.rule_id == case.rule_id]


def test_every_rule_has_noop_and_rewrite_cases() -> None:
    kinds: dict[str, set[str]] = {}
    for c in CASES:
        kinds.setdefault(c.rule_id, set()).add(c.kind)
    registered = {r.id for r in all_rules()}
    missing = {rid: {"noop", "rewrite"} - kinds.get(rid, set()) for rid in registered}
    assert {k: v for k, v in missing.items() if v} == {}
    assert set(kinds) <= registered, f"cases for unregistered ids: {set(kinds) - registered}"


def test_rule_metadata() -> None:
    for r in all_rules():
        assert r.summary.endswith("."), r.id
        assert len(r.summary) <= 130, r.id
        assert r.since in ("0.1.0", "0.2.0"), r.id


def _nest(words: list[str]) -> dict:
    from verl_migrate.keys import parse_text

    tree: dict = {}
    for w in words:
        key, _, value = w.lstrip("+").partition("=")
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = parse_text(value)
    return tree


_YAML_VARIANT_KINDS = ("rename-key", "move-subtree", "split-dict", "rename-value", "replace-target", "drop")


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CASES
        if c.kind == "rewrite"
        and c.fmt == "overrides"
        and {r.id: r.kind for r in all_rules()}[c.rule_id] in _YAML_VARIANT_KINDS
    ],
    ids=lambda c: c.rule_id,
)
def test_rule_rewrite_yaml_variant(case: Case) -> None:
    """The same rewrite, written as a nested YAML config, gives the same data as the override form."""
    import io

    from ruamel.yaml import YAML

    from verl_migrate.keys import normalize
    from verl_migrate.upstream import pinned

    buf = io.StringIO()
    YAML().dump(_nest(case.words("before")), buf)
    with pinned(case.target):
        out, report = migrate_yaml_text(buf.getvalue(), only=[case.rule_id])
    assert {c.rule_id for c in report.changes} == {case.rule_id}
    assert normalize(yaml_io.load(out, "out")) == _nest(case.words("after"))
