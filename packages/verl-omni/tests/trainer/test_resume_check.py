"""`assert_resume_matches_straight` (tests/trainer/conftest.py), the check of the seven "3 steps straight == 2 steps +
1 resumed" trainer tests, on hand-made runs: it must refuse a differing metric, weight or AdamW state."""

from __future__ import annotations

import pathlib

import pytest
import torch

from .conftest import ResumeRuns, TrainerRun, assert_resume_matches_straight


def _run(rows: list[dict[str, float]], fingerprint: dict | None = None) -> TrainerRun:
    return TrainerRun(rows, {}, fingerprint, None, pathlib.Path("run"), pathlib.Path("ckpt"))


def _state(weight: float = 1.0, exp_avg: float = 0.5, step: int = 3) -> dict:
    optim = {"w": {"step": torch.tensor(3.0), "exp_avg": torch.full((2,), exp_avg)}}
    return {"step": step, "model": {"w": torch.full((2,), weight)}, "optim": optim}


def _runs(*, resumed_row: dict | None = None, state: dict | None = None, split_extra: dict | None = None) -> ResumeRuns:
    rows = [{"actor/loss": float(i), "timing_s/step": 9.0 + i} for i in range(3)]
    split = [{**row, "timing_s/step": 0.1, **(split_extra or {})} for row in rows]
    return ResumeRuns(
        straight=_run(rows, _state()),
        first_two=_run(split[:2]),
        resumed=_run([resumed_row or split[2]], state or _state()),
    )


def test_equal_runs_pass_timings_aside():
    assert_resume_matches_straight(_runs())


@pytest.mark.parametrize(
    ("runs", "match"),
    [
        pytest.param(_runs(resumed_row={"actor/loss": 2.5}), r"step 3: \['actor/loss'\]", id="metric"),
        pytest.param(_runs(state=_state(weight=1.5)), r"^w\b", id="weight"),
        pytest.param(_runs(state=_state(exp_avg=0.25)), r"\('w', 'exp_avg'\)", id="adamw-state"),
        pytest.param(_runs(state=_state(step=2)), "assert 3 == 2", id="global-step"),
        pytest.param(_runs(split_extra={"async/lag": 2.0}), r"step 1: \['async/lag'\]", id="split-only-key"),
    ],
)
def test_a_difference_is_refused(runs, match):
    with pytest.raises(AssertionError, match=match):
        assert_resume_matches_straight(runs)


def test_split_only_prefixes_skip_keys_the_straight_run_lacks_but_compare_shared_ones():
    assert_resume_matches_straight(_runs(split_extra={"async/lag": 2.0}), split_only=("async/",))
    runs = _runs()
    runs.straight.history[0]["async/lag"] = 1.0
    runs.first_two.history[0]["async/lag"] = 2.0
    with pytest.raises(AssertionError, match=r"step 1: \['async/lag'\]"):
        assert_resume_matches_straight(runs, split_only=("async/",))


def test_a_failed_run_is_named():
    runs = _runs()
    runs.first_two.error = RuntimeError("boom")
    with pytest.raises(AssertionError, match="first_two: RuntimeError"):
        assert_resume_matches_straight(runs)
