"""`migrate_config_dir`: a user's config folder migrated for one run into another folder, the user's files only read."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from verl_migrate import yaml_io
from verl_migrate.configdir import migrate_config_dir
from verl_migrate.errors import MigrationError

TARGET = "project"
PRE6200 = pathlib.Path(__file__).parent / "pre6200" / "config"

LOOSE = """\
defaults:
  - diffusion_trainer
  - _self_
actor_rollout_ref:
  actor:
    policy_loss:
      loss_mode: flow_grpo
"""


def _files(folder: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_loose_config_is_migrated_as_old_and_keeps_lora_rank_32(tmp_path: pathlib.Path) -> None:
    user, out = tmp_path / "cfg", tmp_path / "out"
    user.mkdir(), out.mkdir()
    (user / "old.yaml").write_text(LOOSE)
    (user / "notes.txt").write_text("not a config")
    result = migrate_config_dir(str(user), "old", str(out))
    assert result.config_name == "old" and result.changed == [str(user / "old.yaml")]
    data = yaml_io.load((out / "old.yaml").read_text(), "old.yaml")
    assert data["actor_rollout_ref"]["actor"]["diffusion_loss"]["loss_mode"] == "flow_grpo"
    assert data["actor_rollout_ref"]["model"]["lora_rank"] == 32
    assert _files(user) == {"notes.txt": b"not a config", "old.yaml": LOOSE.encode()}
    assert sorted(_files(out)) == ["old.yaml"]


def test_a_config_that_shows_nothing_old_still_gets_the_old_defaults(tmp_path: pathlib.Path) -> None:
    """Run by the old command, a config is old verl's: its implicit LoRA rank is the old 32."""
    (tmp_path / "cfg").mkdir(), (tmp_path / "out").mkdir()
    (tmp_path / "cfg" / "few.yaml").write_text("defaults:\n  - diffusion_trainer\n  - _self_\ntrainer:\n  nnodes: 1\n")
    result = migrate_config_dir(str(tmp_path / "cfg"), "few.yaml", str(tmp_path / "out"))
    assert result.changed and "lora_rank: 32" in (tmp_path / "out" / "few.yaml").read_text()


def test_an_old_root_config_lists_its_group_files_again_under_another_name(tmp_path: pathlib.Path) -> None:
    user, out = tmp_path / "cfg", tmp_path / "out"
    shutil.copytree(PRE6200, user)
    out.mkdir()
    before = _files(user)
    result = migrate_config_dir(str(user), "diffusion_trainer", str(out))
    assert result.config_name == "diffusion_trainer_migrated"
    assert sorted(result.changed) == sorted(
        str(user / n)
        for n in ("diffusion_trainer.yaml", "model/diffusion_model.yaml", "rollout/diffusion_rollout.yaml")
    )
    assert sorted(_files(out)) == [
        "diffusion_trainer_migrated.yaml",
        "model/diffusion_model.yaml",
        "rollout/diffusion_rollout.yaml",
    ]
    primary = yaml_io.load((out / "diffusion_trainer_migrated.yaml").read_text(), "p")
    assert list(primary["defaults"]) == [
        "diffusion_trainer",
        {"rollout@actor_rollout_ref.rollout": "diffusion_rollout"},
        {"model@actor_rollout_ref.model": "diffusion_model"},
        "_self_",
    ]
    resolved = " ".join(f.message for r in result.reports for f in r.findings)
    assert "has the same name" not in resolved and "no longer layers on" not in resolved
    assert _files(user) == before


def test_a_users_copy_of_diffusion_trainer_beside_the_primary_is_not_copied(tmp_path: pathlib.Path) -> None:
    user, out = tmp_path / "cfg", tmp_path / "out"
    shutil.copytree(PRE6200, user)
    (user / "old.yaml").write_text(LOOSE)
    out.mkdir()
    migrate_config_dir(str(user), "old", str(out))
    assert not (out / "diffusion_trainer.yaml").exists()  # `- diffusion_trainer` is the installed config


def test_no_primary_in_the_folder_means_the_installed_config(tmp_path: pathlib.Path) -> None:
    assert migrate_config_dir(str(tmp_path), "diffusion_trainer", str(tmp_path / "x")) is None


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        pytest.param("trainer:\n  logger: a\n  logger: b\n", MigrationError, "old.yaml.*duplicate key", id="yaml"),
        pytest.param(
            "actor_rollout_ref:\n  rollout:\n    height: 64\n    pipeline:\n      height: 32\n",
            MigrationError,
            "old.yaml.*both set",
            id="conflict",
        ),
    ],
)
def test_a_file_the_rules_refuse_is_named(tmp_path: pathlib.Path, text: str, error: type, match: str) -> None:
    (tmp_path / "cfg").mkdir(), (tmp_path / "out").mkdir()
    (tmp_path / "cfg" / "old.yaml").write_text(text)
    with pytest.raises(error, match=match):
        migrate_config_dir(str(tmp_path / "cfg"), "old", str(tmp_path / "out"))


def test_the_output_folder_may_not_be_the_users(tmp_path: pathlib.Path) -> None:
    (tmp_path / "old.yaml").write_text(LOOSE)
    with pytest.raises(ValueError, match="never written"):
        migrate_config_dir(str(tmp_path), "old", str(tmp_path))
    assert (tmp_path / "old.yaml").read_text() == LOOSE
