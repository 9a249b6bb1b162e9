"""Metrics trackers of a run: `metrics.jsonl` (always), console, TensorBoard and wandb (offline by default).

The files and trackers get every metric under its full verl-style key (`critic/rewards/mean`, `actor/pg_loss`, ...);
the console shows one short line per step with the few that tell whether a run learns (`CONSOLE_KEYS`, the
learning margin); docs/omni/metrics.md explains each.

`check_loggers` runs at start-up (before Ray): a tracker whose package is missing is an error naming the pip
command that installs it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
from collections.abc import Callable
from typing import Any

import torch

from verl_omni.trainer.report import learning_margin
from verl_omni.trainer.video_grid import image_grid  # also public here (`tracking.image_grid`)

__all__ = ["CONSOLE_KEYS", "Tracking", "check_loggers", "image_grid"]

_EXTRAS = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}  # module, pip package

CONSOLE_KEYS = (
    ("critic/rewards/mean", "reward", "{:+.5f}"),
    ("val/reward_mean", "val_reward", "{:+.5f}"),
    ("actor/ppo_kl", "kl", "{:+.2e}"),
    ("actor/kl_loss", "kl_ref", "{:.2e}"),
    ("actor/pg_clipfrac", "clipfrac", "{:.3f}"),
    ("perf/throughput", "img/s", "{:.2f}"),
)
"""(metric, label, format) of the one console line per step; `margin` (the learning margin) follows `reward`."""
_MARGIN_KEYS = ("critic/rewards/mean", "critic/rewards/std", "perf/images_per_step")


def check_loggers(loggers: list[str]) -> None:
    """Import every tracker's package now.

    Raises:
        ImportError: `trainer.logger` names a tracker whose package is missing (names the pip package).
    """
    import importlib

    for name in loggers:
        if name in _EXTRAS:
            module, extra = _EXTRAS[name]
            try:
                importlib.import_module(module)
            except ImportError as e:
                raise ImportError(
                    f"trainer.logger: {name!r} needs the {module!r} package; install it with `pip install {extra}` "
                    f"or remove {name!r} from trainer.logger"
                ) from e


class Tracking:
    """Send each step's metrics to `metrics.jsonl` and the trackers named in `trainer.logger`.

    Args:
        loggers (`list[str]`): `console`, `tensorboard`, `wandb`.
        run_dir (`pathlib.Path`): `metrics.jsonl`, `tensorboard/` and `wandb/` go here.
        project (`str`), experiment (`str`): tracker project and run names.
        config (`dict`): the run's config, stored with wandb.
        write (`Callable[[str], None]`, *optional*): how console lines are printed (e.g. `tqdm.write`).
    """

    def __init__(
        self,
        loggers: list[str],
        run_dir: pathlib.Path,
        *,
        project: str,
        experiment: str,
        config: dict[str, Any] | None = None,
        write: Callable[[str], None] = print,
    ) -> None:
        check_loggers(loggers)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = run_dir
        self.console = "console" in loggers
        self.write = write
        self.jsonl_path = run_dir / "metrics.jsonl"
        self._jsonl = open(self.jsonl_path, "a")  # noqa: SIM115 - closed in close()
        self._reward_rows: list[dict[str, float]] = []  # what the console's learning margin is computed from
        self._tb = None
        self._wandb = None
        if "tensorboard" in loggers:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))
        if "wandb" in loggers:
            import wandb

            os.environ.setdefault("WANDB_MODE", "offline")
            self._wandb = wandb.init(project=project, name=experiment, dir=str(run_dir), config=config or {})

    def begin(self, step: int) -> None:
        """Keep only the rows of `metrics.jsonl` up to `step`, the step this run resumes from (none for a fresh run).

        A fresh run in a folder an earlier run wrote to starts an empty file (its rows would mix into the reward
        curve and the learning margin); a resumed run keeps the history up to its checkpoint and drops what was
        logged after it. The file is replaced atomically.
        """
        self._jsonl.close()
        kept = []
        self._reward_rows = []
        if step > 0 and self.jsonl_path.is_file():
            for line in self.jsonl_path.read_text().splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):  # a torn last line of a killed run
                    if int(json.loads(line)["step"]) <= step:
                        kept.append(line + "\n")
                        self._keep_reward_row(json.loads(line))
        tmp = self.jsonl_path.with_name(self.jsonl_path.name + ".tmp")
        tmp.write_text("".join(kept))
        os.replace(tmp, self.jsonl_path)
        self._jsonl = open(self.jsonl_path, "a")  # noqa: SIM115 - closed in close()

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Write `metrics` of `step` to every tracker (one jsonl object, one console line)."""
        row = {"step": step, **{k: _plain(v) for k, v in sorted(metrics.items())}}
        self._jsonl.write(json.dumps(row) + "\n")
        self._jsonl.flush()
        self._keep_reward_row(metrics)
        if self.console:
            self.write(self.console_line(metrics, step))
        if self._tb is not None:
            for key, value in metrics.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(dict(metrics), step=step)

    def console_line(self, metrics: dict[str, float], step: int) -> str:
        """`step N | reward +0.12345 | margin +2.1 se | kl ... | clipfrac ... | img/s ...`: what is present.

        `margin` is the learning margin of the steps logged so far (`report.learning_margin`: mean reward of the last
        3 steps minus the first 3, in standard errors); it appears from the 6th step on.
        """
        parts = [f"step {step}"]
        for key, label, fmt in CONSOLE_KEYS:
            if key in metrics:
                parts.append(f"{label} {fmt.format(metrics[key])}")
            if key == "critic/rewards/mean" and key in metrics:
                margin = learning_margin(self._reward_rows)
                if margin is not None:
                    parts.append(f"margin {margin['margin']:+.1f} se")
        return " | ".join(parts)

    def _keep_reward_row(self, metrics: dict[str, Any]) -> None:
        if all(key in metrics for key in _MARGIN_KEYS):
            self._reward_rows.append({key: float(metrics[key]) for key in _MARGIN_KEYS})

    def log_images(self, tag: str, images: torch.Tensor, step: int) -> None:
        """Log uint8 images `(B, 3, H, W)` as one grid to TensorBoard and wandb."""
        import numpy as np

        grid = np.asarray(image_grid(images))
        if self._tb is not None:
            self._tb.add_image(tag, grid, step, dataformats="HWC")
        if self._wandb is not None:
            import wandb

            self._wandb.log({tag: wandb.Image(grid)}, step=step)

    def close(self) -> None:
        """Flush and close every tracker."""
        if not self._jsonl.closed:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
