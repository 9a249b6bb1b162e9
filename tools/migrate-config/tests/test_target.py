"""`verl_migrate.target` agrees with the key tree, and with the installed target config once it exists."""

import os

import pytest

from verl_migrate import target
from verl_migrate.keys import head_defaults
from verl_migrate.validate import omni_config_dir


def test_root_defaults_name_existing_groups_options_and_packages() -> None:
    for group, package, option in target.ROOT_DEFAULTS:
        assert target.option_exists(group, option), (group, option)
        if package:
            assert any(k.startswith(package + ".") for k in head_defaults()), package
    assert "algorithm.trainer_type" in target.root_keys() and "algorithm.adv_estimator" in target.root_keys()
    assert not [k for k in target.root_keys() if k.startswith("actor_rollout_ref.rollout.")]


def test_target_classes_come_from_the_key_tree() -> None:
    from verl_migrate.rules import all_rules

    news = {r.id: r.new for r in all_rules() if r.kind == "replace-target"}
    assert news["target-model-config"] == head_defaults()["actor_rollout_ref.model._target_"]
    assert news["target-algorithm-config"] == target.target_class("algorithm")
    with pytest.raises(KeyError, match=r"no `trainer\._target_`"):
        target.target_class("trainer")


@pytest.mark.skipif(omni_config_dir() is None, reason="this project's verl-omni ships no Hydra config yet")
def test_target_matches_the_installed_config() -> None:  # pragma: no cover - runs once the trainer config lands
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
    from gen_target import describe

    defaults, groups = describe(omni_config_dir())
    assert tuple(defaults) == target.ROOT_DEFAULTS
    for group, options in groups.items():
        assert set(options) <= set(target.GROUP_OPTIONS.get(group, ())), group


def test_a_target_without_config_groups_gets_roots_without_group_entries(monkeypatch) -> None:
    """This project's trainer config may compose no groups at all: a migrated root then lists none of verl's."""
    from verl_migrate import migrate_yaml_text

    monkeypatch.setattr(target, "ROOT_DEFAULTS", ())
    monkeypatch.setattr(target, "GROUP_OPTIONS", {})
    text = "defaults:\n  - data@data: legacy_data\n  - my_team@trainer: ours\n  - _self_\ntrainer:\n  nnodes: 1\n"
    out, report = migrate_yaml_text(text, only=["root-defaults-complete"])
    assert out.startswith("defaults:\n  - my_team@trainer: ours\n  - _self_\n")
    assert any(f.rule_id == "root-defaults-complete" and "my_team" in f.path for f in report.findings)
