"""End-of-run artifacts: `reward_curve.png`, the first/last validation sample grid, and the learning margin.

Each validation's images are also kept in `run_dir/val_images/step_N.pt` (uint8 `(B, 3, H, W)`), so the grid of a
resumed run still shows the run's first validation, each row labelled with its global step.
"""

from __future__ import annotations

import json
import logging
import math
import pathlib
from typing import TYPE_CHECKING, Any

import torch

from verl_omni.trainer.video_grid import image_grid, write_video_gif, write_video_mp4

if TYPE_CHECKING:
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

__all__ = [
    "begin_val_images",
    "learning_margin",
    "load_val_images",
    "read_metrics",
    "reward_curve_figure",
    "save_val_images",
    "write_reward_curve",
    "write_sample_grid",
]

_VAL_DIR = "val_images"
_LABEL_W = 64  # px left of each grid row for its "step N" label
_CURVE_PX, _DPI = (720, 420), 100  # reward_curve.png: width, height in pixels
TRAIN_COLOR, VAL_COLOR = "#1e50c8", "#c83c1e"  # reward_curve.png: training steps (blue), validation (red)


def read_metrics(path: pathlib.Path) -> list[dict[str, Any]]:
    """Rows of `metrics.jsonl` by step (a step logged twice, e.g. after a resume, keeps its last row)."""
    rows: dict[int, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[int(row["step"])] = row
    return [rows[s] for s in sorted(rows)]


def learning_margin(rows: list[dict[str, Any]], k: int = 3) -> dict[str, float] | None:
    """Mean reward of the last `k` steps minus the first `k`, in standard errors of that difference.

    Each step's mean reward has the standard error `critic/rewards/std / sqrt(perf/images_per_step)`; the average of
    `k` step means has `sqrt(Σ se²) / k`, and the difference of two such averages `sqrt(se_first² + se_last²)`.

    Returns:
        `{"first": ..., "last": ..., "diff": ..., "se": ..., "margin": diff / se}`, or None with fewer than `2k` steps.
    """
    train = [r for r in rows if "critic/rewards/mean" in r]
    if len(train) < 2 * k:
        return None

    def average(part: list[dict[str, Any]]) -> tuple[float, float]:
        means = [r["critic/rewards/mean"] for r in part]
        ses = [r["critic/rewards/std"] / math.sqrt(r["perf/images_per_step"]) for r in part]
        return sum(means) / k, math.sqrt(sum(s * s for s in ses)) / k

    first, se_first = average(train[:k])
    last, se_last = average(train[-k:])
    se = math.sqrt(se_first**2 + se_last**2)
    diff = last - first
    return {"first": first, "last": last, "diff": diff, "se": se, "margin": diff / se if se > 0 else math.inf}


def write_reward_curve(rows: list[dict[str, Any]], path: pathlib.Path, title: str = "FlowGRPO") -> pathlib.Path:
    """Plot the per-step mean reward (± one standard error) and the validation reward as a 720 x 420 PNG.

    Args:
        rows (`list[dict]`): `read_metrics` rows; training steps carry `critic/rewards/mean`, `critic/rewards/std`
            and `perf/images_per_step`, validation steps `val/reward_mean`.
        path (`pathlib.Path`): where the PNG goes.
        title (`str`, *optional*, defaults to `"FlowGRPO"`): the chart's title starts with it.
    """
    reward_curve_figure(rows, title).savefig(path, format="png")
    return path


def reward_curve_figure(rows: list[dict[str, Any]], title: str = "FlowGRPO") -> Figure:
    """The chart `write_reward_curve` saves: a matplotlib `Figure` on its own Agg canvas (no pyplot, no display).

    Training steps are an error-bar line (`TRAIN_COLOR`), validation steps hollow squares (`VAL_COLOR`).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    train = [(r["step"], r["critic/rewards/mean"], r["critic/rewards/std"] / math.sqrt(r["perf/images_per_step"]))
             for r in rows if "critic/rewards/mean" in r]  # fmt: skip
    val = [(r["step"], r["val/reward_mean"]) for r in rows if "val/reward_mean" in r]
    fig = Figure(figsize=(_CURVE_PX[0] / _DPI, _CURVE_PX[1] / _DPI), dpi=_DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if train:
        steps, means, ses = zip(*train)
        ax.errorbar(steps, means, yerr=ses, color=TRAIN_COLOR, ecolor=TRAIN_COLOR, capsize=4, marker="o",
                    markersize=4, linewidth=1.5, label="mean reward per step (bar: ± 1 s.e.)")  # fmt: skip
    if val:
        steps, means = zip(*val)
        ax.plot(steps, means, linestyle="none", marker="s", markersize=7, markerfacecolor="none",
                markeredgecolor=VAL_COLOR, markeredgewidth=2, label="validation")  # fmt: skip
    if train or val:
        ax.legend(loc="best", fontsize="small")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.set(title=f"{title}: mean reward", xlabel="step", ylabel="reward")
    fig.subplots_adjust(left=0.14, right=0.97, top=0.92, bottom=0.12)  # fixed margins: tight_layout costs 0.2 s
    return fig


def _val_files(run_dir: pathlib.Path) -> dict[int, pathlib.Path]:
    folder = pathlib.Path(run_dir) / _VAL_DIR
    found = {}
    for path in folder.glob("step_*.pt") if folder.is_dir() else ():
        suffix = path.stem[len("step_") :]
        if suffix.isdigit():
            found[int(suffix)] = path
    return found


def save_val_images(run_dir: pathlib.Path, step: int, images: torch.Tensor) -> None:
    """Keep the validation images of global step `step` in `run_dir/val_images/step_{step}.pt`."""
    folder = pathlib.Path(run_dir) / _VAL_DIR
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".step_{step}.pt.tmp"
    torch.save(images.cpu(), tmp)
    tmp.replace(folder / f"step_{step}.pt")


def begin_val_images(run_dir: pathlib.Path, step: int) -> None:
    """A run starting at `step` drops the kept images of later steps (all of them when it starts fresh, at 0)."""
    for s, path in _val_files(run_dir).items():
        if s > step or step == 0:
            path.unlink(missing_ok=True)


def load_val_images(run_dir: pathlib.Path) -> dict[int, torch.Tensor]:
    """Global step -> the validation images kept under `run_dir` (`save_val_images`)."""
    return {s: torch.load(path, weights_only=True) for s, path in sorted(_val_files(run_dir).items())}


_MP4_WARNED: list[str] = []  # the missing-package message, once warned (one warning per process)


def _write_mp4_or_warn(rows: list[torch.Tensor], path: pathlib.Path) -> pathlib.Path | None:
    """`write_video_mp4`, or None and one warning (per process) when its packages are missing."""
    try:
        return write_video_mp4(rows, path)
    except ImportError as e:
        if not _MP4_WARNED:
            _MP4_WARNED.append(str(e))
            logger.warning("%s; the sample videos are written as GIF only", e)
        return None


def write_sample_grid(val_images: dict[int, torch.Tensor], path: pathlib.Path, scale: int = 2) -> pathlib.Path | None:
    """Top row: the first validation's images; bottom row: the last one's (same prompts and noise).

    Each row is labelled with its global step (`step N`) in a strip on the left. Videos `(B, F, 3, H, W)` are drawn
    as frame strips, and the same rows are played beside it as an animated GIF (`path` with suffix `.gif`) and an
    H.264 MP4 (suffix `.mp4`, `write_video_mp4`); without `imageio` / `imageio-ffmpeg` (verl-omni's `video` extra)
    only the GIF is written, with one warning per process naming the missing package.
    """
    from PIL import Image, ImageDraw

    if not val_images:
        return None
    first, last = min(val_images), max(val_images)
    steps = [first] if first == last else [first, last]
    rows = [val_images[s] for s in steps]
    count = min(r.shape[0] for r in rows)
    if rows[0].dim() == 5:
        write_video_gif(rows, path.with_suffix(".gif"))
        _write_mp4_or_warn(rows, path.with_suffix(".mp4"))
    images = image_grid(torch.cat([r[:count] for r in rows]), cols=count, scale=scale)
    grid = Image.new("RGB", (images.width + _LABEL_W, images.height), "white")
    grid.paste(images, (_LABEL_W, 0))
    draw = ImageDraw.Draw(grid)
    row_h = images.height // len(steps)
    for i, step in enumerate(steps):
        draw.text((4, i * row_h + max(row_h // 2 - 6, 0)), f"step {step}", fill="black")
    grid.save(path)
    return path
