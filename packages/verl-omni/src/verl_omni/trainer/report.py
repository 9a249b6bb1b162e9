"""End-of-run artifacts: `reward_curve.png`, the first/last validation sample grid, and the learning margin."""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any

import torch

from verl_omni.trainer.tracking import image_grid

__all__ = ["learning_margin", "read_metrics", "write_reward_curve", "write_sample_grid"]


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


def write_sample_grid(val_images: dict[int, torch.Tensor], path: pathlib.Path, scale: int = 2) -> pathlib.Path | None:
    """Top row: the first validation's images; bottom row: the last validation's (same prompts and noise)."""
    if not val_images:
        return None
    first, last = min(val_images), max(val_images)
    rows = [val_images[first]] if first == last else [val_images[first], val_images[last]]
    count = min(r.shape[0] for r in rows)
    grid = image_grid(torch.cat([r[:count] for r in rows]), cols=count, scale=scale)
    grid.save(path)
    return path
