"""End-of-run artifacts: `reward_curve.png`, the first/last validation sample grid, and the learning margin.

Each validation's images are also kept in `run_dir/val_images/step_N.pt` (uint8 `(B, 3, H, W)`), so the grid of a
resumed run still shows the run's first validation, each row labelled with its global step.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import torch

from verl_omni.trainer.tracking import image_grid

__all__ = [
    "begin_val_images",
    "learning_margin",
    "load_val_images",
    "read_metrics",
    "save_val_images",
    "write_reward_curve",
    "write_sample_grid",
]

_VAL_DIR = "val_images"
_LABEL_W = 64  # px left of each grid row for its "step N" label


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
    """Plot the per-step mean reward (± one standard error) and the validation reward as a PNG (PIL only)."""
    from PIL import Image, ImageDraw

    train = [(r["step"], r["critic/rewards/mean"], r["critic/rewards/std"] / math.sqrt(r["perf/images_per_step"]))
             for r in rows if "critic/rewards/mean" in r]  # fmt: skip
    val = [(r["step"], r["val/reward_mean"]) for r in rows if "val/reward_mean" in r]
    width, height, pad = 720, 420, 60
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    values = [m + s for _, m, s in train] + [m - s for _, m, s in train] + [m for _, m in val]
    steps = [s for s, *_ in train] + [s for s, _ in val]
    if not values:
        img.save(path)
        return path
    lo, hi = min(values), max(values)
    if hi - lo < 1e-12:
        lo, hi = lo - 1e-6, hi + 1e-6
    smin, smax = min(steps), max(max(steps), min(steps) + 1)

    def xy(step: float, value: float) -> tuple[float, float]:
        x = pad + (step - smin) / (smax - smin) * (width - 2 * pad)
        y = height - pad - (value - lo) / (hi - lo) * (height - 2 * pad)
        return x, y

    draw.rectangle([pad, pad, width - pad, height - pad], outline="black")
    for frac in (0.0, 0.5, 1.0):
        value = lo + frac * (hi - lo)
        _, y = xy(smin, value)
        draw.text((4, y - 6), f"{value:+.4f}", fill="black")
        draw.line([pad - 4, y, pad, y], fill="black")
    for step in sorted(set(steps)):
        x, _ = xy(step, lo)
        draw.line([x, height - pad, x, height - pad + 4], fill="black")
        draw.text((x - 4, height - pad + 8), str(step), fill="black")
    for step, mean, se in train:  # error bars with caps; a bar shorter than the dot hides behind it
        (x, y1), (_, y2) = xy(step, mean - se), xy(step, mean + se)
        draw.line([x, y1, x, y2], fill=(120, 160, 230), width=2)
        for y in (y1, y2):
            draw.line([x - 5, y, x + 5, y], fill=(120, 160, 230), width=2)
    if len(train) > 1:
        draw.line([xy(s, m) for s, m, _ in train], fill=(30, 80, 200), width=2)
    for step, mean, _ in train:
        x, y = xy(step, mean)
        draw.ellipse([x - 3, y - 3, x + 3, y + 3], fill=(30, 80, 200))
    for step, mean in val:
        x, y = xy(step, mean)
        draw.rectangle([x - 4, y - 4, x + 4, y + 4], outline=(200, 60, 30), width=2)
    draw.text((pad, 12), f"{title}: mean reward per step (blue, bar: ± 1 s.e.), validation (red)", fill="black")
    draw.text((width // 2 - 12, height - 24), "step", fill="black")
    img.save(path)
    return path


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


def write_sample_grid(val_images: dict[int, torch.Tensor], path: pathlib.Path, scale: int = 2) -> pathlib.Path | None:
    """Top row: the first validation's images; bottom row: the last one's (same prompts and noise).

    Each row is labelled with its global step (`step N`) in a strip on the left.
    """
    from PIL import Image, ImageDraw

    if not val_images:
        return None
    first, last = min(val_images), max(val_images)
    steps = [first] if first == last else [first, last]
    rows = [val_images[s] for s in steps]
    count = min(r.shape[0] for r in rows)
    images = image_grid(torch.cat([r[:count] for r in rows]), cols=count, scale=scale)
    grid = Image.new("RGB", (images.width + _LABEL_W, images.height), "white")
    grid.paste(images, (_LABEL_W, 0))
    draw = ImageDraw.Draw(grid)
    row_h = images.height // len(steps)
    for i, step in enumerate(steps):
        draw.text((4, i * row_h + max(row_h // 2 - 6, 0)), f"step {step}", fill="black")
    grid.save(path)
    return path
