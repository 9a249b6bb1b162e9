"""Issue 13: verl's own diffusion files as they stood before #6200, migrated as a user would.

The inputs are hand-written look-alikes of the six files (same key paths, defaults lists, headers, shell variables,
comments and True/False spellings): `pre6200/config/{diffusion_trainer,model/diffusion_model,
rollout/diffusion_rollout}.yaml`, the generated dump `golden/old_full_dump.yaml` and the launch scripts
`golden/run_qwen_image_ocr_lora.sh` (L) and `golden/run_flowgrpo_trainer_diffusers.sh` (T). The target is this
project's trainer config; composition is checked with the installed verl-omni (its Hydra config and `load_config`),
and skipped with a reason when it is not installed. `test_e2e_train.py` trains one step with each migrated file.
"""

import os
import re
import shutil

import pytest

from verl_migrate import migrate_script_text, migrate_yaml_text, yaml_io
from verl_migrate.cli import main
from verl_migrate.errors import MigrationError
from verl_migrate.report import FileReport
from verl_migrate.script import commands
from verl_migrate.target import ENTRY_MODULE
from verl_migrate.validate import check_groups
from verl_migrate.yamldoc import YamlDoc

HERE = os.path.dirname(__file__)
CONFIG = os.path.join(HERE, "pre6200", "config")
ROOT = os.path.join(CONFIG, "diffusion_trainer.yaml")
MODEL = os.path.join(CONFIG, "model", "diffusion_model.yaml")
ROLLOUT = os.path.join(CONFIG, "rollout", "diffusion_rollout.yaml")
DUMP = os.path.join(HERE, "golden", "old_full_dump.yaml")
L = os.path.join(HERE, "golden", "run_qwen_image_ocr_lora.sh")
T = os.path.join(HERE, "golden", "run_flowgrpo_trainer_diffusers.sh")
TARGET = "project"
ALIAS = "${oc.select:actor_rollout_ref.model.algorithm,flow_grpo}"


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _yaml(path: str, **kw):
    return migrate_yaml_text(_read(path), path, **kw)


def _doc(text: str, package: str = "") -> YamlDoc:
    return YamlDoc(yaml_io.load(text, "x"), FileReport("x"), package=package)


def _trainer_check():
    """The `--validate` backend that runs the installed trainer's `load_config` (skip without verl-omni)."""
    from verl_migrate.validate import trainer_loader

    if not trainer_loader():
        pytest.skip("verl-omni with its trainer config is not installed")
    from verl_migrate import trainer_check

    return trainer_check


# 1. entry point ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [L, T])
def test_scripts_run_upstream_verl_omnis_entry_point(path: str) -> None:
    out, _ = migrate_script_text(_read(path), path)
    assert f"python3 -m {ENTRY_MODULE} \\\n" in out
    assert "verl-omni-train" not in out and "main_flowgrpo" not in out
    assert len(commands(out, path)) == 1


# 2. aliases ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [ROOT, DUMP])
def test_root_configs_keep_the_adv_estimator_alias(path: str) -> None:
    out, _ = _yaml(path)
    doc = _doc(out)
    assert doc.get("algorithm.adv_estimator") == ALIAS
    assert doc.get("actor_rollout_ref.model.algorithm") == "flow_grpo"


@pytest.mark.parametrize("path", [ROOT, DUMP])
def test_a_migrated_root_config_migrates_again_to_itself(path: str) -> None:
    once, _ = _yaml(path)
    twice, report = migrate_yaml_text(once, path)
    assert twice == once and not report.changes


def test_a_root_next_to_an_old_diffusion_trainer_yaml_is_warned_about_it(tmp_path) -> None:
    (tmp_path / "diffusion_trainer.yaml").write_text(_read(ROOT))  # the old root left in the config folder
    mine = tmp_path / "my_trainer.yaml"
    _, report = migrate_yaml_text(_read(ROOT), str(mine))
    (warning,) = [f for f in report.findings if f.category == "warning" and f.path == "defaults"]
    assert str(tmp_path / "diffusion_trainer.yaml") in warning.message and "Move it out" in warning.message
    _, alone = migrate_yaml_text(_read(ROOT), str(tmp_path / "elsewhere" / "my_trainer.yaml"))
    assert not [f for f in alone.findings if f.category == "warning" and f.path == "defaults"]


def test_layered_configs_and_scripts_leave_the_alias_to_the_target() -> None:
    out, _ = migrate_yaml_text("defaults:\n  - diffusion_trainer\n  - _self_\nalgorithm:\n  adv_estimator: flow_grpo\n")
    assert "adv_estimator" not in out and "algorithm: flow_grpo" in out


# 3. a migrated root resolves every key the target reads: it extends the target's root ------------------------
def test_migrated_root_extends_the_targets_root() -> None:
    from verl_migrate.target import SEARCHPATH

    doc = _doc(_yaml(ROOT)[0])
    assert [e.name for e in doc.group_entries()] == ["diffusion_trainer", "_self_"]
    assert doc.get("hydra.searchpath") == [SEARCHPATH]
    assert not doc.has("algorithm.trainer_type")  # the target's root gives it; the file keeps the user's keys only


def test_migrated_dump_defines_every_key_of_the_target() -> None:
    from verl_migrate.keys import head_defaults

    doc = _doc(_yaml(DUMP)[0])
    assert [k for k in head_defaults() if not doc.has(k)] == []
    assert doc.get("algorithm.trainer_type") == "policy_gradient" and doc.get("algorithm.sample_source") == "online"


@pytest.mark.slow
@pytest.mark.parametrize("path", [ROOT, DUMP])
def test_migrated_roots_load_in_the_trainer(path: str) -> None:
    check = _trainer_check()
    assert check.check_root(_read(path)) != []  # the old file does not load: the test can fail
    problems = check.check_root(_yaml(path)[0])
    # the dump keeps verl's `rollout.name: ???`: the rollout backend is the one value a user must give
    assert problems == ([] if path == ROOT else [("actor_rollout_ref.rollout.name", problems[0][1])])


@pytest.mark.slow
@pytest.mark.parametrize("path", [L, T])
def test_migrated_scripts_load_in_the_trainer(path: str) -> None:
    check = _trainer_check()
    out, _ = migrate_script_text(_read(path), path)
    (words,) = commands(out, path)
    problems, unchecked = check.check_overrides([w for w in words if "=" in w])
    assert problems == [] and unchecked  # the shell variables are reported, not checked
    (old_words,) = commands(_read(path), path)
    old_problems, _ = check.check_overrides([w for w in old_words if "=" in w])
    assert old_problems  # the old overrides do not load


# 4. defaults lists name groups that exist ---------------------------------------------------------------------
def test_migrated_root_defaults_name_existing_groups() -> None:
    out, _ = _yaml(ROOT)
    report = FileReport("x")
    assert check_groups(_doc(out), report) == 0, report.findings
    assert check_groups(_doc(_read(ROOT)), FileReport("x")) > 0  # the old list names groups that are gone


@pytest.mark.parametrize("how", ["folder", "--package"])
def test_rollout_group_file_drops_the_llm_base_and_adds_no_lora_key(how: str, tmp_path) -> None:
    if how == "folder":
        out, report = _yaml(ROLLOUT)
    else:
        plain = tmp_path / "diffusion_rollout.yaml"
        shutil.copy(ROLLOUT, plain)
        out, report = migrate_yaml_text(_read(str(plain)), str(plain), package="actor_rollout_ref.rollout")
    assert "- rollout\n" not in out and "defaults:\n\n  # this file's fields win\n  - _self_\n" in out
    assert "lora" not in out
    assert not [c for c in report.changes if c.rule_id == "lora-rank-default"]
    assert {c.rule_id for c in report.changes if c.action == "drop-group"} == {"group-file-defaults"}


@pytest.mark.slow
@pytest.mark.parametrize("path", [ROLLOUT, MODEL])
def test_migrated_group_files_load_listed_after_the_targets_root(path: str) -> None:
    check = _trainer_check()
    package = "actor_rollout_ref.rollout" if path == ROLLOUT else "actor_rollout_ref.model"
    assert check.check_group_file(_yaml(path)[0], package) == []
    assert check.check_group_file(_read(path), package) != []  # the old file does not load


# 5. group files are detected, or refused naming --package -------------------------------------------------------
def test_model_group_file_is_detected_by_its_folder_and_fully_migrated() -> None:
    out, report = _yaml(MODEL)
    doc = _doc(out, "actor_rollout_ref.model")
    pipeline = "actor_rollout_ref.model.pipeline"
    # the model's mirror of the sampling settings is upstream's; this project's trainer has none: it goes
    assert not doc.has(pipeline) and not doc.has("actor_rollout_ref.model.height")
    assert not doc.has("actor_rollout_ref.model.extra_configs")
    assert doc.get("actor_rollout_ref.model._target_") == "verl_omni.config.DiffusionModelConfig"
    assert any(f.category == "note" and "from its folder" in f.message for f in report.findings)


def test_a_group_file_of_unknown_place_is_refused_naming_the_package(tmp_path, capsys) -> None:
    loose = tmp_path / "my_model.yaml"
    shutil.copy(MODEL, loose)
    with pytest.raises(MigrationError, match=r"pass `--package actor_rollout_ref\.model`"):
        migrate_yaml_text(_read(str(loose)), str(loose))
    assert main([str(loose)]) == 2
    assert "--package actor_rollout_ref.model" in capsys.readouterr().err
    assert main(["--package", "actor_rollout_ref.model", str(loose)]) == 0
    assert "_target_: verl_omni.config.DiffusionModelConfig\n" in capsys.readouterr().out


# 6. values reached through shell variables -----------------------------------------------------------------
def test_reward_path_variable_is_followed() -> None:
    src = _read(L)
    line = src[: src.index("reward_path=")].count("\n") + 1
    out, report = migrate_script_text(src, L)
    (change,) = [c for c in report.changes if c.rule_id == "reward-fn-ocr-builtin"]
    assert f"`$reward_path` (set on line {line})" in change.note
    # the variable is used once: its assignment is rewritten, the override keeps `$reward_path`
    assert "\nreward_path=pkg://verl_omni.reward.ocr\n" in out
    assert "reward.custom_reward_function.path=$reward_path \\\n" in out


# 7. fidelity --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [ROOT, MODEL])
def test_true_false_spellings_survive(path: str) -> None:
    out, report = _yaml(path)
    dropped = {c.path.rsplit(".", 1)[-1] for c in report.changes if c.action == "drop"}
    spelled = [ln.strip() for ln in _read(path).splitlines() if re.search(r": (True|False)$", ln)]
    assert spelled, "the fixture must spell booleans the old way"
    for line in spelled:
        assert line.split(":")[0] in dropped or re.search(rf"^ *{re.escape(line)}$", out, re.M), line


def test_root_defaults_comments_stay_with_their_entries() -> None:
    out, _ = _yaml(ROOT)
    assert "# Critic model config." not in out and "# Rollout correction config." not in out
    assert "# Reward config." not in out  # every verl group entry goes, with its comment
    assert "  # this file's own fields come last and win\n  - _self_\n" in out


@pytest.mark.parametrize("path", [ROOT, MODEL, ROLLOUT, L, T])
def test_untouched_lines_stay_byte_equal_and_in_order(path: str) -> None:
    """Every original key line no rule touched is in the output, unchanged, in the same order."""
    text = _read(path)
    out, report = (migrate_script_text if path.endswith(".sh") else migrate_yaml_text)(text, path)
    touched = {c.line for c in report.changes if c.line}
    # a value reached through a shell variable is rewritten in the variable's assignment
    touched |= {int(m) for c in report.changes for m in re.findall(r"\(set on line (\d+)\)", c.note or "")}
    touched |= _emptied_headers(text.splitlines(), touched)
    kept = [
        ln
        for n, ln in enumerate(text.splitlines(), 1)
        if n not in touched and ln.strip() and not ln.strip().startswith(("#", "- "))
    ]
    assert len(kept) >= 3  # the rollout file keeps `defaults:`, `val_kwargs:` and `n: 1` untouched
    rest = iter(out.splitlines())
    assert all(any(ln == o for o in rest) for ln in kept), "an untouched line changed or moved"


def _emptied_headers(lines: list[str], touched: set[int]) -> set[int]:
    """Line numbers of YAML mapping headers (`key:`) all of whose key lines were touched (the mapping went too)."""
    out = set()
    for n, line in enumerate(lines, 1):
        if not line.rstrip().endswith(":") or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        below = []
        for m in range(n + 1, len(lines) + 1):
            sub = lines[m - 1]
            if not sub.strip() or sub.lstrip().startswith("#"):
                continue
            if len(sub) - len(sub.lstrip()) <= indent:
                break
            below.append(m)
        if below and all(m in touched for m in below):
            out.add(n)
    return out


# 8. --validate says what it did not check ----------------------------------------------------------------------
def test_validate_without_the_targets_config_says_what_it_did_not_check(capsys, monkeypatch) -> None:
    from verl_migrate import validate

    monkeypatch.setattr(validate, "omni_config_dir", lambda: None)  # as when verl-omni ships no Hydra config
    assert main(["--validate", "--report", "text", ROOT]) == 0
    err = capsys.readouterr().err
    assert "Not checked: that Hydra composes it" in err and "every key verl-omni's trainer reads is present" in err


@pytest.mark.slow
def test_validate_reports_every_key_the_trainer_rejects(tmp_path, capsys) -> None:
    """`--validate` runs the trainer's own check and reports each rejected key, not only the first."""
    _trainer_check()
    bad = tmp_path / "my_run.yaml"
    bad.write_text("defaults:\n  - diffusion_trainer\n  - _self_\ntrainer:\n  nnodes: two\n  totl_epochs: 3\n")
    assert main(["--validate", "-o", str(tmp_path / "out.yaml"), str(bad)]) == 1
    err = capsys.readouterr().err
    assert "validate: trainer.nnodes: verl-omni's trainer rejects it: expected int" in err
    assert "validate: trainer.totl_epochs: verl-omni's trainer rejects it: unknown key" in err
    assert "Did you mean 'total_epochs'?" in err
