"""Trackers (`metrics.jsonl`, console, TensorBoard) and the end-of-run report."""

from __future__ import annotations

import json
import math

import pytest
import torch

from verl_omni.trainer.report import (
    begin_val_images,
    learning_margin,
    load_val_images,
    read_metrics,
    save_val_images,
    write_reward_curve,
    write_sample_grid,
)
from verl_omni.trainer.tracking import Tracking, check_loggers


def test_jsonl_and_console_line(tmp_path):
    lines = []
    tracker = Tracking(["console"], tmp_path, project="p", experiment="e", write=lines.append)
    tracker.log({"critic/rewards/mean": -0.5, "actor/pg_clipfrac": 0.25, "other": 1.0}, step=1)
    tracker.log({"critic/rewards/mean": float("nan")}, step=2)
    tracker.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0] == {"step": 1, "actor/pg_clipfrac": 0.25, "critic/rewards/mean": -0.5, "other": 1.0}
    assert rows[1]["critic/rewards/mean"] == "nan"
    assert lines[0] == "step 1 | reward -0.50000 | clipfrac 0.250"


def test_tensorboard_writes_event_files(tmp_path):
    pytest.importorskip("tensorboard")
    tracker = Tracking(["tensorboard"], tmp_path, project="p", experiment="e")
    tracker.log({"critic/rewards/mean": 1.0}, step=1)
    tracker.log_images("val/generations", torch.zeros(2, 3, 8, 8, dtype=torch.uint8), step=1)
    tracker.close()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.value for e in events.Scalars("critic/rewards/mean")] == [1.0]
    assert events.Tags()["images"] == ["val/generations"]


def test_a_missing_tracker_package_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("No module named 'wandb'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    monkeypatch.setattr("importlib.import_module", lambda name: no_wandb(name))
    with pytest.raises(ImportError, match=r"trainer\.logger: 'wandb' needs .*`pip install wandb`"):
        check_loggers(["console", "wandb"])


def _rows(means, std=0.02, images=8):
    return [
        {"step": i + 1, "critic/rewards/mean": m, "critic/rewards/std": std, "perf/images_per_step": images}
        for i, m in enumerate(means)
    ]


def test_learning_margin_in_standard_errors():
    margin = learning_margin(_rows([0.0, 0.0, 0.0, 0.1, 0.1, 0.1]))
    se_step = 0.02 / math.sqrt(8)
    se = math.sqrt(2 * 3 * se_step**2) / 3
    assert margin["diff"] == pytest.approx(0.1) and margin["se"] == pytest.approx(se)
    assert margin["margin"] == pytest.approx(0.1 / se)
    assert learning_margin(_rows([0.0] * 5)) is None


def test_read_metrics_keeps_the_last_row_of_a_step(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "a": 1}\n{"step": 2, "a": 2}\n{"step": 2, "a": 3}\n')
    assert read_metrics(path) == [{"step": 1, "a": 1}, {"step": 2, "a": 3}]


def _pixels_of(image, color: str) -> int:
    """How many pixels are within 8 of `color` ("#rrggbb") in every channel."""
    import numpy as np

    target = np.array([int(color[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(np.asarray(image.convert("RGB"), dtype=int) - target) <= 8).all(-1).sum())


def test_reward_curve_plots_each_step_with_its_standard_error_and_the_validation_reward():
    import numpy as np

    from verl_omni.trainer.report import VAL_COLOR, reward_curve_figure

    rows = [*_rows([0.0, 0.05, 0.1], std=0.02, images=4), {"step": 3, "val/reward_mean": 0.2}]
    (ax,) = reward_curve_figure(rows).axes
    (train,) = ax.containers  # the error-bar line of the training steps
    line, _, (bars,) = train
    np.testing.assert_allclose(line.get_xydata(), [[1, 0.0], [2, 0.05], [3, 0.1]])
    se = 0.02 / 2  # std / sqrt(images per step)
    ends = [(seg[0][1], seg[1][1]) for seg in bars.get_segments()]
    np.testing.assert_allclose(ends, [(m - se, m + se) for m in (0.0, 0.05, 0.1)])
    (val,) = [artist for artist in ax.lines if artist.get_markeredgecolor() == VAL_COLOR]
    np.testing.assert_allclose(val.get_xydata(), [[3, 0.2]])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["validation", "mean reward per step (bar: ± 1 s.e.)"]


def test_reward_curve_png(tmp_path):
    from PIL import Image

    from verl_omni.trainer.report import TRAIN_COLOR, VAL_COLOR

    rows = [*_rows([0.0, 0.05, 0.1]), {"step": 3, "val/reward_mean": 0.2}]
    curve = Image.open(write_reward_curve(rows, tmp_path / "curve.png"))
    assert curve.format == "PNG" and curve.size == (720, 420)
    assert _pixels_of(curve, TRAIN_COLOR) and _pixels_of(curve, VAL_COLOR)
    empty = Image.open(write_reward_curve([], tmp_path / "empty.png"))  # no rewards yet: an empty chart
    assert empty.size == (720, 420) and not _pixels_of(empty, TRAIN_COLOR)


def test_sample_grid_png(tmp_path):
    from PIL import Image

    first = torch.zeros(3, 3, 4, 4, dtype=torch.uint8)
    last = torch.full((3, 3, 4, 4), 255, dtype=torch.uint8)
    grid = Image.open(write_sample_grid({5: last, 0: first, 3: last}, tmp_path / "grid.png", scale=1))
    label = grid.width - 12  # the strip left of the images that names each row's global step
    assert grid.size == (label + 12, 8) and label > 0
    assert grid.getpixel((label, 0)) == (0, 0, 0) and grid.getpixel((label, 4)) == (255, 255, 255)
    assert any(grid.getpixel((x, y)) != (255, 255, 255) for x in range(label) for y in range(8))  # text drawn
    assert write_sample_grid({}, tmp_path / "none.png") is None


def test_wandb_runs_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")  # the trainer's default when unset
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = Tracking(["wandb"], tmp_path, project="p", experiment="e", config={"a": 1})
    tracker.log({"critic/rewards/mean": 1.0}, step=1)
    tracker.close()
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))


def test_begin_keeps_the_rows_up_to_the_resumed_step_and_a_fresh_run_starts_empty(tmp_path):
    earlier = [json.dumps({"step": s, "critic/rewards/mean": float(s)}) for s in range(5)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(earlier) + '\n{"step": 5, "critic/re')  # a killed run's torn last line
    tracker = Tracking([], tmp_path, project="p", experiment="e")
    tracker.begin(2)  # resumed from the checkpoint of step 2
    tracker.log({"critic/rewards/mean": -3.0}, 3)
    tracker.close()
    assert [(r["step"], r["critic/rewards/mean"]) for r in read_metrics(path)] == [
        (0, 0.0),
        (1, 1.0),
        (2, 2.0),
        (3, -3.0),
    ]
    fresh = Tracking([], tmp_path, project="p", experiment="e")
    fresh.begin(0)  # a new run in the same folder: nothing of the earlier runs
    fresh.log({"critic/rewards/mean": 7.0}, 1)
    fresh.close()
    assert read_metrics(path) == [{"step": 1, "critic/rewards/mean": 7.0}]


def test_validation_images_outlive_a_resume_and_go_with_a_fresh_run(tmp_path):
    images = {step: torch.full((2, 3, 4, 4), step, dtype=torch.uint8) for step in (0, 4, 8)}
    for step, value in images.items():
        save_val_images(tmp_path, step, value)
    begin_val_images(tmp_path, 4)  # a resume from step 4: the images of step 8 belong to a run that went on
    kept = load_val_images(tmp_path)
    assert sorted(kept) == [0, 4] and all(torch.equal(kept[s], images[s]) for s in kept)
    begin_val_images(tmp_path, 0)  # a fresh run keeps nothing of an earlier one
    assert load_val_images(tmp_path) == {}


def _step_metrics(reward: float) -> dict[str, float]:
    return {
        "critic/rewards/mean": reward,
        "critic/rewards/std": 0.1,
        "perf/images_per_step": 4.0,
        "perf/throughput": 2.5,
        "actor/pg_loss": 1e-9,
        "actor/ppo_kl": 2e-4,
        "actor/pg_clipfrac": 0.0,
        "actor/grad_norm": 0.3,
    }


def test_console_shows_short_names_and_the_margin_from_the_sixth_step(tmp_path):
    lines = []
    tracker = Tracking(["console"], tmp_path, project="p", experiment="e", write=lines.append)
    for step in range(1, 7):
        tracker.log(_step_metrics(0.1 * step), step=step)
    tracker.close()
    assert lines[0] == "step 1 | reward +0.10000 | kl +2.00e-04 | clipfrac 0.000 | img/s 2.50"
    # last 3 (0.5) minus first 3 (0.2) over sqrt(2 * 3 * (0.1 / 2)^2) / 3 = 0.0408: 7.3 standard errors
    assert lines[5] == "step 6 | reward +0.60000 | margin +7.3 se | kl +2.00e-04 | clipfrac 0.000 | img/s 2.50"
    assert all("pg_loss" not in line and "grad_norm" not in line for line in lines)
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])
    assert {"actor/pg_loss", "actor/grad_norm", "critic/rewards/mean", "perf/throughput"} <= set(row)


def test_console_margin_of_a_resumed_run_counts_the_kept_steps(tmp_path):
    first = Tracking([], tmp_path, project="p", experiment="e")
    first.begin(0)
    for step in range(1, 9):
        first.log(_step_metrics(0.1 * step), step=step)
    first.close()
    lines = []
    resumed = Tracking(["console"], tmp_path, project="p", experiment="e", write=lines.append)
    resumed.begin(5)  # steps 6..8 of the first run are dropped
    resumed.log(_step_metrics(0.6), step=6)
    resumed.close()
    assert "margin +7.3 se" in lines[0]


def test_metrics_doc_explains_every_console_field():
    from pathlib import Path

    from verl_omni.trainer.tracking import CONSOLE_KEYS

    doc = (Path(__file__).resolve().parents[4] / "docs" / "omni" / "metrics.md").read_text()
    for key, label, _ in CONSOLE_KEYS:
        assert f"| `{label}` | `{key}` |" in doc, f"docs/omni/metrics.md lacks the row of {label} ({key})"
    assert "| `margin` |" in doc and "## Why `actor/pg_loss` sits near 0" in doc
