"""`CheckpointManager`: atomic `global_step_N` checkpoints of a run, resume resolution and pruning.

Layout under `trainer.default_local_dir`:

    global_step_N/actor/               the actor engine's DCP checkpoint (model, optimizer, extra per rank)
    global_step_N/trainer_state.pt     step, prompt-sampler state, weight version, the run's settings (`RUN_KEYS`)
    global_step_N/COMPLETE             written last, before the folder gets its final name
    latest_checkpointed_iteration.txt  the newest complete step (verl's file name)

A checkpoint is written into a hidden temporary folder and renamed to `global_step_N` only when complete; the
`latest` file is then replaced atomically. A crash mid-save leaves the previous checkpoint and `latest` untouched.
Multi-node runs need `default_local_dir` on a filesystem every node shares (each rank writes its DCP shard).

One folder holds the checkpoints of one line of training (`resolve_resume` with `run=`): a run resumes from a
checkpoint whose recorded settings (`RUN_KEYS`) equal its own, and never writes beside checkpoints it did not
continue from (a fresh run into a folder that holds some, or a resume from step S beside checkpoints newer than S,
is refused with `CheckpointConflictError`).
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

__all__ = ["LATEST_FILE", "RUN_KEYS", "CheckpointConflictError", "CheckpointManager", "run_signature"]

logger = logging.getLogger(__name__)

LATEST_FILE = "latest_checkpointed_iteration.txt"
_PREFIX = "global_step_"

RUN_KEYS = (
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.lora_rank",
    "actor_rollout_ref.model.lora_alpha",
    "actor_rollout_ref.model.target_modules",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.rollout.algo.sde_type",
    "actor_rollout_ref.rollout.algo.sde_window_size",
    "actor_rollout_ref.rollout.algo.sde_window_range",
    "actor_rollout_ref.rollout.algo.sample_strategy",
    "actor_rollout_ref.rollout.algo.iters_per_group",
    "actor_rollout_ref.rollout.algo.sde_window_seed",
    "actor_rollout_ref.rollout.algo.init_same_noise",
    "actor_rollout_ref.actor.diffusion_loss.loss_mode",
    "algorithm.adv_estimator",
    "data.train_files",
    "data.train_batch_size",
    "data.seed",
)
"""The settings a checkpoint records and a resume must match: the weights' shape (model, LoRA), what a step is
(group size, SDE and its window schedule, shared initial noise, loss, estimator) and where the prompt sampler's
state points (prompt files, batch, seed)."""


class CheckpointConflictError(ValueError):
    """`trainer.default_local_dir` holds checkpoints this run must not resume from or write beside."""


def run_signature(config: Any) -> dict[str, Any]:
    """The values of `RUN_KEYS` in a `DiffusionTrainerConfig` (lists as lists), recorded with every checkpoint."""
    out: dict[str, Any] = {}
    for key in RUN_KEYS:
        value: Any = config
        for part in key.split("."):
            value = getattr(value, part)
        out[key] = list(value) if isinstance(value, (list, tuple)) else value
    return out


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

    def check_resume(self, path: pathlib.Path | None, run: dict[str, Any], total_steps: int | None = None) -> None:
        """Refuse a resume (or a fresh start, `path` None) that would mix two runs' checkpoints in the root.

        Args:
            path (`pathlib.Path`, *optional*): the checkpoint `resolve_resume` chose; None starts from step 0.
            run (`dict`): this run's `run_signature`.
            total_steps (`int`, *optional*): the run's last step; a checkpoint past it is refused.

        Raises:
            CheckpointConflictError: a fresh run into a folder that holds checkpoints; a checkpoint whose recorded
                settings differ from `run` (names each key, both values); checkpoints newer than the one resumed
                from, or of another folder's run, beside which this run would write; a checkpoint past `total_steps`.
        """
        steps = self.steps()
        where = f"trainer.default_local_dir={self.root}"
        ways_out = f"train into another folder (trainer.default_local_dir=...), or delete {self.root}"
        if path is None:
            if steps:
                raise CheckpointConflictError(
                    f"{where} holds the checkpoints of an earlier run ({_span(steps)}) and this run starts fresh "
                    f"(trainer.resume_mode=disable), so their checkpoints would mix: resume from them "
                    f"(trainer.resume_mode=auto), {ways_out}"
                )
            return
        saved = self.load_trainer_state(path).get("run")
        if saved is not None:
            diffs = [f"{k}: {saved.get(k)!r} there, {v!r} now" for k, v in run.items() if saved.get(k, v) != v]
            if diffs:
                raise CheckpointConflictError(
                    f"checkpoint {path} is of a run with other settings ({'; '.join(diffs)}): resume with the "
                    f"settings it was saved with, or start fresh: {ways_out}"
                )
        step = int(self.load_trainer_state(path)["step"])
        if total_steps is not None and step > total_steps:
            raise CheckpointConflictError(
                f"checkpoint {path} is at step {step}, past trainer.total_training_steps={total_steps}: raise "
                f"trainer.total_training_steps above {step} to train on from it, or start fresh: {ways_out}"
            )
        own = path.resolve().parent == self.root.resolve()
        beside = [s for s in steps if s > step] if own else steps
        if beside:
            what = f"newer than step {step}, the one resumed from" if own else f"of another run than {path}"
            raise CheckpointConflictError(
                f"{where} holds checkpoints {what} ({_span(beside)}); this run would write its own beside them: "
                f"delete those, or {ways_out}"
            )

    @staticmethod
    def load_trainer_state(path: pathlib.Path) -> dict[str, Any]:
        """The trainer state saved with a checkpoint."""
        return torch.load(path / "trainer_state.pt", weights_only=False)

    # ---- saving -------------------------------------------------------------------------------------------

    def save(self, step: int, save_actor: Callable[[str], object], trainer_state: dict[str, Any]) -> pathlib.Path:
        """Write checkpoint `step` atomically and return its folder.

        Args:
            step (`int`): the training step just finished.
            save_actor (`Callable[[str], object]`): writes the actor engine's checkpoint into the given folder (its
                result is ignored).
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


def _span(steps: list[int]) -> str:
    names = [f"{_PREFIX}{s}" for s in steps]
    return names[0] if len(names) == 1 else f"{len(names)} checkpoints, {names[0]} to {names[-1]}"


def _write_atomic(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)
