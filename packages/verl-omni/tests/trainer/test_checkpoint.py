"""`CheckpointManager`: atomic saves, resume resolution, pruning."""

from __future__ import annotations

import pytest

from verl_omni.trainer.checkpoint import (
    LATEST_FILE,
    RUN_KEYS,
    CheckpointConflictError,
    CheckpointManager,
    run_signature,
)


def _save_actor(path: str) -> None:
    import pathlib

    folder = pathlib.Path(path)
    folder.mkdir(parents=True)
    (folder / "model.bin").write_text("weights")


def test_save_writes_a_complete_folder_and_the_latest_file(tmp_path):
    manager = CheckpointManager(tmp_path)
    path = manager.save(3, _save_actor, {"step": 3, "sampler": {"epoch": 0}})
    assert path == tmp_path / "global_step_3"
    assert sorted(p.name for p in path.iterdir()) == ["COMPLETE", "actor", "trainer_state.pt"]
    assert (tmp_path / LATEST_FILE).read_text() == "3"
    assert manager.latest() == path
    assert manager.load_trainer_state(path)["sampler"] == {"epoch": 0}


def test_a_crash_mid_save_leaves_the_last_checkpoint_and_latest_intact(tmp_path):
    manager = CheckpointManager(tmp_path)
    good = manager.save(1, _save_actor, {"step": 1})

    def crash(path: str) -> None:
        _save_actor(path)
        raise RuntimeError("killed while writing")

    with pytest.raises(RuntimeError, match="killed while writing"):
        manager.save(2, crash, {"step": 2})
    assert manager.latest() == good and manager.steps() == [1]
    assert (tmp_path / LATEST_FILE).read_text() == "1"
    assert not (tmp_path / "global_step_2").exists()
    manager.save(2, _save_actor, {"step": 2})  # the next save removes the half-written temporary
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_resave_of_the_same_step_replaces_it(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(2, _save_actor, {"step": 2, "tag": "a"})
    manager.save(2, _save_actor, {"step": 2, "tag": "b"})
    assert manager.load_trainer_state(manager.latest())["tag"] == "b" and manager.steps() == [2]


def test_resolve_resume_modes(tmp_path):
    manager = CheckpointManager(tmp_path / "ckpt")
    assert manager.resolve_resume("auto", None) is None
    first = manager.save(1, _save_actor, {"step": 1})
    second = manager.save(2, _save_actor, {"step": 2})
    assert manager.resolve_resume("auto", None) == second
    assert manager.resolve_resume("disable", None) is None
    assert manager.resolve_resume("resume_path", str(first)) == first
    with pytest.raises(FileNotFoundError, match=r"trainer\.resume_from_path: .*global_step_9 is not a complete"):
        manager.resolve_resume("resume_path", str(tmp_path / "ckpt" / "global_step_9"))


def test_latest_falls_back_to_the_newest_complete_checkpoint(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, _save_actor, {"step": 1})
    (tmp_path / LATEST_FILE).write_text("7")
    assert manager.latest() == tmp_path / "global_step_1"


def test_max_to_keep_prunes_the_oldest(tmp_path):
    manager = CheckpointManager(tmp_path, max_to_keep=2)
    for step in (1, 2, 3):
        manager.save(step, _save_actor, {"step": step})
    assert manager.steps() == [2, 3]


# ---- one folder, one line of training (`check_resume`) ------------------------------------------------------------

RUN = {"actor_rollout_ref.model.path": "/models/a", "actor_rollout_ref.model.lora_rank": 8, "data.seed": 0}


def _saved(manager: CheckpointManager, *steps: int, run: dict | None = None) -> None:
    for step in steps:
        manager.save(step, _save_actor, {"step": step, "run": dict(run or RUN)})


def test_check_resume_takes_a_checkpoint_of_the_same_settings(tmp_path):
    manager = CheckpointManager(tmp_path / "ckpt")
    manager.check_resume(None, RUN, 10)  # fresh into an empty folder
    _saved(manager, 2, 4)
    manager.check_resume(manager.resolve_resume("auto", None), RUN, 10)
    manager.check_resume(manager.resolve_resume("auto", None), RUN, 4)  # complete already: nothing left to train
    _saved(CheckpointManager(tmp_path / "old"), 2, run={k: v for k, v in RUN.items() if k != "data.seed"})
    CheckpointManager(tmp_path / "new").check_resume(tmp_path / "old" / "global_step_2", RUN, 10)  # no such record


def test_check_resume_refuses_a_fresh_run_beside_checkpoints(tmp_path):
    manager = CheckpointManager(tmp_path)
    _saved(manager, 2, 4, 6)
    match = (
        r"holds the checkpoints of an earlier run \(3 checkpoints, global_step_2 to global_step_6\).*"
        r"trainer\.resume_mode=auto.*trainer\.default_local_dir="
    )
    with pytest.raises(CheckpointConflictError, match=match):
        manager.check_resume(manager.resolve_resume("disable", None), RUN, 10)


def test_check_resume_refuses_a_checkpoint_of_other_settings_naming_each_key(tmp_path):
    manager = CheckpointManager(tmp_path)
    _saved(manager, 2)
    other = {**RUN, "actor_rollout_ref.model.lora_rank": 16, "data.seed": 3}
    match = (
        r"global_step_2 is of a run with other settings "
        r"\(actor_rollout_ref\.model\.lora_rank: 8 there, 16 now; data\.seed: 0 there, 3 now\)"
    )
    with pytest.raises(CheckpointConflictError, match=match):
        manager.check_resume(manager.resolve_resume("auto", None), other, 10)


def test_check_resume_refuses_a_checkpoint_past_the_last_step(tmp_path):
    manager = CheckpointManager(tmp_path)
    _saved(manager, 24)
    with pytest.raises(CheckpointConflictError, match=r"at step 24, past trainer\.total_training_steps=2: raise"):
        manager.check_resume(manager.resolve_resume("auto", None), RUN, 2)


def test_check_resume_refuses_to_write_beside_newer_or_foreign_checkpoints(tmp_path):
    manager = CheckpointManager(tmp_path / "ckpt")
    _saved(manager, 2, 4, 6)
    with pytest.raises(CheckpointConflictError, match=r"newer than step 2, the one resumed from \(2 checkpoints, "
                       r"global_step_4 to global_step_6\)"):  # fmt: skip
        manager.check_resume(manager.resolve_resume("resume_path", str(tmp_path / "ckpt" / "global_step_2")), RUN, 9)
    other = CheckpointManager(tmp_path / "other")
    _saved(other, 1)
    with pytest.raises(CheckpointConflictError, match=r"of another run than .*other/global_step_1 \(3 checkpoints"):
        manager.check_resume(other.resolve_resume("resume_path", str(tmp_path / "other" / "global_step_1")), RUN, 9)


def test_run_signature_records_every_run_key_of_a_config():
    from verl_omni.trainer.config import load_config

    signature = run_signature(load_config(config_name="quickstart"))
    assert list(signature) == list(RUN_KEYS)
    assert signature["actor_rollout_ref.model.lora_rank"] == 8
    assert signature["actor_rollout_ref.actor.diffusion_loss.loss_mode"] == "flow_grpo"  # another loss: another run
    assert signature["data.train_files"] in ("builtin://quickstart", ["builtin://quickstart"])


# ---- `verl-omni-train` resumes or refuses before Ray starts --------------------------------------------------------


@pytest.fixture
def cli(tiny_qwen_image_path, tmp_path, monkeypatch):
    """`(argv, signature)`: a quickstart run on the tiny model into tmp, and its `run_signature`; Ray must not start."""
    import ray

    from verl_omni.trainer.components import preflight
    from verl_omni.trainer.config import load_config

    def refuse(*args, **kwargs):
        raise AssertionError("ray.init was called: the checkpoint folder must be refused before any worker starts")

    monkeypatch.setattr(ray, "init", refuse)
    argv = [
        f"actor_rollout_ref.model.path={tiny_qwen_image_path}",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.total_training_steps=2",
    ]
    return argv, run_signature(preflight(load_config(argv, config_name="quickstart")).config)


@pytest.mark.parametrize(
    ("saved", "extra", "match"),
    [
        # a longer earlier run of the same settings left step 24: a 2-step rerun must not train beside it
        ({}, [], r"global_step_24 is at step 24, past trainer\.total_training_steps=2"),
        ({"actor_rollout_ref.model.lora_rank": 4}, [],
         r"global_step_24 is of a run with other settings \(actor_rollout_ref\.model\.lora_rank: 4 there, 8 now\)"),
        ({}, ["trainer.resume_mode=disable"], r"holds the checkpoints of an earlier run \(global_step_24\)"),
    ],
    ids=["longer-earlier-run", "other-lora-rank", "fresh-run-beside"],
)  # fmt: skip
def test_cli_refuses_a_checkpoint_folder_it_must_not_mix_with_exit_2(cli, saved, extra, match, tmp_path, capsys):
    import re

    from verl_omni.trainer.main import EXIT_CONFIG, run

    argv, signature = cli
    CheckpointManager(tmp_path / "ckpt").save(24, _save_actor, {"step": 24, "run": {**signature, **saved}})
    assert run([*argv, *extra]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "verl-omni-train: config error: " in err and re.search(match, err), err
    assert CheckpointManager(tmp_path / "ckpt").steps() == [24]  # nothing removed, nothing written
