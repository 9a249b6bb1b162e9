"""`verl_migrate.target` and the shipped key tree agree with the installed trainer config (this project's)."""

import os
import subprocess
import sys

import pytest

from verl_migrate import target
from verl_migrate.keys import head_defaults
from verl_migrate.validate import omni_config_dir

TARGET = "project"
GEN = os.path.join(os.path.dirname(__file__), "..", "scripts", "gen_target.py")


def test_root_defaults_name_existing_groups_and_the_root_keeps_its_aliases() -> None:
    for group, package, option in target.ROOT_DEFAULTS:
        assert target.option_exists(group, option), (group, option)
        if package:
            assert any(k.startswith(package + ".") for k in head_defaults()), package
    assert head_defaults()["algorithm.adv_estimator"] == "${oc.select:actor_rollout_ref.model.algorithm,flow_grpo}"
    # it composes no groups, so a migrated root extends it and must define none of its keys itself
    assert target.extends_root() and target.root_keys() == ()


def test_target_classes_come_from_the_key_tree() -> None:
    from verl_migrate.rules import all_rules

    rules = {r.id: r for r in all_rules() if r.kind == "replace-target"}
    assert rules["target-model-config"]._resolved().new == head_defaults()["actor_rollout_ref.model._target_"]
    assert rules["target-algorithm-config"]._resolved().new == target.target_class("algorithm")
    assert target.target_class("algorithm").startswith("verl_omni.")
    with pytest.raises(KeyError, match=r"no `actor_rollout_ref\.rollout\.val_kwargs\._target_`"):
        target.target_class("actor_rollout_ref.rollout.val_kwargs")


@pytest.mark.skipif(omni_config_dir() is None, reason="verl-omni (with its trainer config) is not installed")
def test_target_matches_the_installed_config() -> None:
    """One command regenerates the target; `--check` fails naming each stale file while they disagree."""
    run = subprocess.run([sys.executable, GEN, "--check"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr


@pytest.mark.skipif(omni_config_dir() is None, reason="verl-omni (with its trainer config) is not installed")
def test_gen_target_check_names_a_stale_key_tree(tmp_path) -> None:
    """A config folder with one key more than the shipped tree: `--check` exits 1 naming the key tree."""
    import shutil

    folder = tmp_path / "config"
    shutil.copytree(omni_config_dir(), folder)
    path = folder / f"{target.CONFIG_NAME}.yaml"
    path.write_text(path.read_text() + "\nextra_section:\n  knob: 1\n")
    cmd = [sys.executable, GEN, "--check", "--config-dir", str(folder)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert "verl_omni_diffusion_trainer.flat.txt: stale" in run.stderr


def test_a_target_without_config_groups_gets_roots_that_extend_it(monkeypatch) -> None:
    """This project's trainer config composes no groups: a migrated root extends it, listing none of verl's groups."""
    from verl_migrate import migrate_yaml_text

    monkeypatch.setattr(target, "ROOT_DEFAULTS", ())
    monkeypatch.setattr(target, "GROUP_OPTIONS", {})
    text = "defaults:\n  - data@data: legacy_data\n  - my_team@trainer: ours\n  - _self_\ntrainer:\n  nnodes: 1\n"
    out, report = migrate_yaml_text(text, only=["root-defaults-complete"])
    assert out.startswith("defaults:\n  - diffusion_trainer\n  - my_team@trainer: ours\n  - _self_\n")
    assert any(f.rule_id == "root-defaults-complete" and "my_team" in f.path for f in report.findings)
