"""`CheckpointManager`: atomic `global_step_N` checkpoints of a run, resume resolution and pruning.

Layout under `trainer.default_local_dir`:

    global_step_N/actor/               the actor engine's DCP checkpoint (model, optimizer, extra per rank)
    global_step_N/trainer_state.pt     step, prompt-sampler state, weight version
    global_step_N/COMPLETE             written last, before the folder gets its final name
    latest_checkpointed_iteration.txt  the newest complete step (verl's file name)

A checkpoint is written into a hidden temporary folder and renamed to `global_step_N` only when complete; the
`latest` file is then replaced atomically. A crash mid-save leaves the previous checkpoint and `latest` untouched.
Multi-node runs need `default_local_dir` on a filesystem every node shares (each rank writes its DCP shard).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import time
import uuid
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["LATEST_FILE", "CheckpointManager"]

logger = logging.getLogger(__name__)

LATEST_FILE = "latest_checkpointed_iteration.txt"
_PREFIX = "global_step_"


class CheckpointManager:
    """Save, find and prune the checkpoints of one run.

    Args:
        root (`str` or `pathlib.Path`): `trainer.default_local_dir`.
        max_to_keep (`int`, *optional*): keep the newest this many (`trainer.max_actor_ckpt_to_keep`); null keeps all.
    """

    def __init__(self, root: str | os.PathLike, max_to_keep: int | None = None) -> None:
        self.root = pathlib.Path(root).expanduser()
        self.max_to_keep = max_to_keep

    # ---- finding ------------------------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints under the root, ascending."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.glob(f"{_PREFIX}*"):
            suffix = path.name[len(_PREFIX) :]
            if suffix.isdigit() and (path / "COMPLETE").is_file():
                found.append(int(suffix))
        return sorted(found)

    def latest(self) -> pathlib.Path | None:
        """The checkpoint `latest_checkpointed_iteration.txt` names (or the newest complete one), if any."""
        latest = self.root / LATEST_FILE
        if latest.is_file():
            text = latest.read_text().strip()
            path = self.root / f"{_PREFIX}{text}"
            if text.isdigit() and (path / "COMPLETE").is_file():
                return path
            logger.warning("%s names step %r, which is not a complete checkpoint; using the newest one", latest, text)
        steps = self.steps()
        return self.root / f"{_PREFIX}{steps[-1]}" if steps else None

    def resolve_resume(self, mode: str, resume_from_path: str | None) -> pathlib.Path | None:
        """The checkpoint to resume from for `trainer.resume_mode` (`auto`, `disable`, `resume_path`).

        Raises:
            FileNotFoundError: `resume_path` names a folder that is not a complete checkpoint.
        """
        if mode == "disable":
            return None
        if mode == "resume_path":
            path = pathlib.Path(str(resume_from_path)).expanduser()
            if not (path / "COMPLETE").is_file() or not (path / "trainer_state.pt").is_file():
                raise FileNotFoundError(
                    f"trainer.resume_from_path: {path} is not a complete checkpoint (a global_step_N folder with "
                    "COMPLETE and trainer_state.pt)"
                )
            return path
        return self.latest()

    @staticmethod
    def load_trainer_state(path: pathlib.Path) -> dict[str, Any]:
        """The trainer state saved with a checkpoint."""
        return torch.load(path / "trainer_state.pt", weights_only=False)

    # ---- saving -------------------------------------------------------------------------------------------

    def save(self, step: int, save_actor: Callable[[str], None], trainer_state: dict[str, Any]) -> pathlib.Path:
        """Write checkpoint `step` atomically and return its folder.

        Args:
            step (`int`): the training step just finished.
            save_actor (`Callable[[str], None]`): writes the actor engine's checkpoint into the given folder.
            trainer_state (`dict`): the driver's state (sampler, counters).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_stale_temporaries()
        tmp = self.root / f".{_PREFIX}{step}.tmp-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        save_actor(str(tmp / "actor"))
        torch.save(trainer_state, tmp / "trainer_state.pt")
        meta = {"step": step, "time": time.time()}
        (tmp / "COMPLETE").write_text(json.dumps(meta))
        final = self.root / f"{_PREFIX}{step}"
        if final.exists():  # the same step saved again (e.g. after a resume): swap, then drop the old one
            old = self.root / f".{_PREFIX}{step}.old-{uuid.uuid4().hex[:8]}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _write_atomic(self.root / LATEST_FILE, str(step))
        self._prune()
        return final

    def _prune(self) -> None:
        if self.max_to_keep is None:
            return
        for step in self.steps()[: -self.max_to_keep]:
            shutil.rmtree(self.root / f"{_PREFIX}{step}", ignore_errors=True)

    def _remove_stale_temporaries(self) -> None:
        for path in self.root.glob(f".{_PREFIX}*"):
            shutil.rmtree(path, ignore_errors=True)


def _write_atomic(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)
