"""MixGRPO's window schedule (`sde_window_start`, `pin_sde_window`) against algorithms.md §2.6 and a second example."""

from __future__ import annotations

import pytest

from verl_core.config.errors import ConfigValueError
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.rollout import pin_sde_window, sde_window_start


@pytest.mark.parametrize(
    ("strategy", "kwargs", "expected"),
    [
        pytest.param("progressive", {"iters_per_group": 1}, [2, 3, 3, 3], id="progressive-1"),
        pytest.param("progressive", {"iters_per_group": 2}, [0, 2, 2, 3], id="progressive-2"),
        pytest.param("random", {"seed": 42}, [0, 3, 2, 0], id="random-seed-42"),
    ],
)
def test_window_start_matches_the_worked_table_of_algorithms_md(strategy, kwargs, expected):
    """algorithms.md §2.6 (a): T=10, W=2, envelope [0, 5] (last start 3), training steps 1..4."""
    starts = [sde_window_start(gs, 2, (0, 5), strategy=strategy, **kwargs) for gs in range(1, 5)]
    assert starts == expected


def test_progressive_window_second_example_slides_by_its_size_and_stays_on_the_last_position():
    """By hand: W=1, envelope [1, 4] (starts 1..3), 3 steps per position: s = min(1 + ⌊gs/3⌋, 3)."""
    starts = [sde_window_start(gs, 1, [1, 4], strategy="progressive", iters_per_group=3) for gs in range(1, 11)]
    assert starts == [1, 1, 2, 2, 2, 3, 3, 3, 3, 3]


def test_pin_sde_window_places_the_configured_schedule_for_every_request_of_a_step():
    config = DiffusionRolloutConfig(
        pipeline={"num_inference_steps": 10},
        algo={"sde_window_size": 2, "sde_window_range": [0, 5], "sample_strategy": "progressive", "iters_per_group": 2},
    )
    algo = config.algo
    base = config.sampling_config("qwen_image")
    pinned = [
        pin_sde_window(base, gs, algo.sde_window_seed, strategy=algo.sample_strategy, iters_per_group=2)
        for gs in range(1, 5)
    ]
    assert [p.sde_window_range for p in pinned] == [[0, 2], [2, 4], [2, 4], [3, 5]]
    assert all(p.sde_window_size == 2 and p.num_inference_steps == 10 for p in pinned)


@pytest.mark.parametrize(
    ("args", "kwargs", "needle"),
    [
        pytest.param(
            (1, 4, (0, 3)), {}, r"sde_window_size: 4 steps do not fit in .*sde_window_range \[0, 3\]", id="fit"
        ),
        pytest.param((1, 1, (0, 3)), {"strategy": "decay"}, "sample_strategy: expected 'random' or", id="strategy"),
        pytest.param((1, 1, (0, 3)), {"strategy": "progressive", "iters_per_group": 0}, "iters_per_group", id="ipg"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_key(args, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        sde_window_start(*args, **kwargs)


@pytest.mark.parametrize(
    ("algo", "needle"),
    [
        pytest.param(
            {"sde_window_size": 4},
            r"algo\.sde_window_size: 4 SDE steps do not fit in pipeline\.num_inference_steps=4 \(at most 3",
            id="steps",
        ),
        pytest.param(
            {"sde_window_size": 3, "sde_window_range": [1, 3]},
            r"algo\.sde_window_size: 3 SDE steps do not fit in algo\.sde_window_range=\[1, 3\] \(at most 2\)",
            id="range",
        ),
    ],
)
def test_a_window_larger_than_the_steps_is_refused_naming_both_keys(algo, needle):
    with pytest.raises(ConfigValueError, match=needle):
        DiffusionRolloutConfig(pipeline={"num_inference_steps": 4}, algo=algo)
