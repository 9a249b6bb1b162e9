"""`CheckpointManager`: atomic saves, resume resolution, pruning."""

from __future__ import annotations

import pytest

from verl_omni.trainer.checkpoint import LATEST_FILE, CheckpointManager


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
