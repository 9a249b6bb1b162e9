"""Issue 13: verl's own diffusion files as they stood before #6200, migrated as a user would.

The inputs are hand-written look-alikes of the six files (same key paths, defaults lists, headers, shell variables,
comments and True/False spellings): `pre6200/config/{diffusion_trainer,model/diffusion_model,
rollout/diffusion_rollout}.yaml`, the generated dump `golden/old_full_dump.yaml` and the launch scripts
`golden/run_qwen_image_ocr_lora.sh` (L) and `golden/run_flowgrpo_trainer_diffusers.sh` (T). Composition is checked
against a stand-in of the target's Hydra config written from the key tree (`target_stub.py`) until this project's
trainer ships its own.
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


@pytest.fixture(scope="module")
def composer(tmp_path_factory):
    pytest.importorskip("hydra")
    from target_stub import write_target_config

    from verl_migrate.compose import Composer

    with Composer(write_target_config(str(tmp_path_factory.mktemp("target")))) as c:
        yield c


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


def test_layered_configs_and_scripts_leave_the_alias_to_the_target() -> None:
    out, _ = migrate_yaml_text("defaults:\n  - diffusion_trainer\n  - _self_\nalgorithm:\n  adv_estimator: flow_grpo\n")
    assert "adv_estimator" not in out and "algorithm: flow_grpo" in out


# 3. a migrated root has every root key the target reads, and composes ------------------------------------------
@pytest.mark.parametrize("path", [ROOT, DUMP])
def test_migrated_roots_define_the_targets_root_keys(path: str) -> None:
    from verl_migrate.target import root_keys

    doc = _doc(_yaml(path)[0])
    assert doc.get("algorithm.trainer_type") == "policy_gradient" and doc.get("algorithm.sample_source") == "online"
    assert [k for k in root_keys() if not doc.has(k)] == []


@pytest.mark.slow
@pytest.mark.parametrize("path", [ROOT, DUMP])
def test_migrated_roots_compose_with_the_targets_groups(composer, path: str) -> None:
    old = _read(path)
    assert composer.root(old) != []  # the old file does not compose (or lacks keys): the test can fail
    assert composer.root(_yaml(path)[0]) == []


@pytest.mark.slow
@pytest.mark.parametrize("path", [L, T])
def test_migrated_scripts_compose_with_the_target(composer, path: str) -> None:
    out, _ = migrate_script_text(_read(path), path)
    (words,) = commands(out, path)
    overrides = [w if "$" not in w else w.split("=", 1)[0] + "=???" for w in words if "=" in w]
    assert composer.overrides(overrides) == []
    (old_words,) = commands(_read(path), path)
    with pytest.raises(Exception, match="Could not override"):  # the old overrides do not compose
        composer.compose([w for w in old_words if "=" in w and "$" not in w])


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
def test_migrated_rollout_group_file_composes_in_the_targets_group(composer) -> None:
    problems = composer.group_file(_yaml(ROLLOUT)[0], "actor_rollout_ref.rollout")
    # it composes; what it lacks is reported by key (verl-omni's rollout group defines far more than this file)
    assert problems and not [p for k, p in problems if k == "defaults" or not p.startswith("missing")]
    old = composer.group_file(_read(ROLLOUT), "actor_rollout_ref.rollout")
    assert [p for k, p in old if k == "defaults"]  # the old file names the LLM `rollout` option: no composition


# 5. group files are detected, or refused naming --package -------------------------------------------------------
def test_model_group_file_is_detected_by_its_folder_and_fully_migrated() -> None:
    out, report = _yaml(MODEL)
    doc = _doc(out, "actor_rollout_ref.model")
    pipeline = "actor_rollout_ref.model.pipeline"
    assert doc.get(f"{pipeline}.height") == "${oc.select:actor_rollout_ref.rollout.pipeline.height,512}"
    assert not doc.has("actor_rollout_ref.model.height") and not doc.has("actor_rollout_ref.model.extra_configs")
    assert doc.get(f"{pipeline}._target_") == "verl_omni.workers.config.diffusion.DiffusionPipelineConfig"
    assert any(f.category == "note" and "from its folder" in f.message for f in report.findings)


def test_a_group_file_of_unknown_place_is_refused_naming_the_package(tmp_path, capsys) -> None:
    loose = tmp_path / "my_model.yaml"
    shutil.copy(MODEL, loose)
    with pytest.raises(MigrationError, match=r"pass `--package actor_rollout_ref\.model`"):
        migrate_yaml_text(_read(str(loose)), str(loose))
    assert main([str(loose)]) == 2
    assert "--package actor_rollout_ref.model" in capsys.readouterr().err
    assert main(["--package", "actor_rollout_ref.model", str(loose)]) == 0
    assert "_target_: verl_omni.workers.config.diffusion.DiffusionPipelineConfig" in capsys.readouterr().out


# 6. values reached through shell variables -----------------------------------------------------------------
def test_reward_path_variable_is_followed() -> None:
    src = _read(L)
    line = src[: src.index("reward_path=")].count("\n") + 1
    _, report = migrate_script_text(src, L)
    (flag,) = [f for f in report.findings if f.rule_id == "reward-fn-example-path"]
    assert f"`$reward_path` (set on line {line})" in flag.message


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
    assert "  # Reward config.\n  - reward@reward: reward\n" in out
    assert "  # this file's own fields come last and win\n  - _self_\n" in out


@pytest.mark.parametrize("path", [ROOT, MODEL, ROLLOUT, L, T])
def test_untouched_lines_stay_byte_equal_and_in_order(path: str) -> None:
    """Every original key line no rule touched is in the output, unchanged, in the same order."""
    text = _read(path)
    out, report = (migrate_script_text if path.endswith(".sh") else migrate_yaml_text)(text, path)
    touched = {c.line for c in report.changes if c.line}
    kept = [
        ln
        for n, ln in enumerate(text.splitlines(), 1)
        if n not in touched and ln.strip() and not ln.strip().startswith(("#", "- "))
    ]
    assert len(kept) >= 5
    rest = iter(out.splitlines())
    assert all(any(ln == o for o in rest) for ln in kept), "an untouched line changed or moved"


# 8. --validate says what it did not check ----------------------------------------------------------------------
def test_validate_without_the_targets_config_says_what_it_did_not_check(capsys, monkeypatch) -> None:
    from verl_migrate import validate

    monkeypatch.setattr(validate, "omni_config_dir", lambda: None)  # as when verl-omni ships no Hydra config
    assert main(["--validate", "--report", "text", ROOT]) == 0
    err = capsys.readouterr().err
    assert "Not checked: that Hydra composes it" in err and "every key verl-omni's trainer reads is present" in err
