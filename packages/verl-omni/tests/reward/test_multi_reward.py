"""Multi-reward (`reward.reward_functions` + `aggregation: weighted_sum`): the sum, per-term metrics, a trainer run."""

from __future__ import annotations

import pytest
import torch

from verl_omni.reward import RewardBatch, RewardConfig, RewardOutput, build_reward_manager
from verl_omni.reward.jpeg import jpeg_sizes_kb


def _batch(images: torch.Tensor) -> RewardBatch:
    n = images.shape[0]
    return RewardBatch(images, [f"p{i}" for i in range(n)], ["any"] * n, [None] * n, [{"i": i} for i in range(n)])


@pytest.mark.parametrize("num_workers", [1, 3])
def test_weighted_sum_of_builtins_and_a_file_with_per_term_means(make_images, write_reward_file, num_workers):
    path = write_reward_file(
        "def score(data_source, solution_image, ground_truth, extra_info, bonus=0.0):\n"
        "    return {'score': extra_info['i'] + bonus, 'odd': extra_info['i'] % 2}\n"
    )
    config = RewardConfig(
        pool="thread",
        num_workers=num_workers,
        reward_functions={
            "small": {"builtin": "jpeg_compressibility", "weight": 2.0},
            "large": {"builtin": "jpeg_incompressibility", "weight": 0.25},
            "index": {"path": path, "name": "score", "weight": -1.0, "reward_kwargs": {"bonus": 1.0}},
        },
    )
    images = make_images(2, 2)
    with build_reward_manager(config) as manager:
        out = manager.score(_batch(images), step=1)
    kb = jpeg_sizes_kb(images)
    index = torch.arange(4, dtype=torch.float64) + 1.0
    expected = 2.0 * (-kb / 500) + 0.25 * kb - index
    assert torch.allclose(out.scores, expected.float())
    assert list(out.terms) == ["small", "large", "index"]
    assert out.terms["index"] == [1.0, 2.0, 3.0, 4.0]
    metrics = out.metrics()
    assert metrics["reward/small/mean"] == pytest.approx(float((-kb / 500).mean()), rel=1e-6)
    assert metrics["reward/large/mean"] == pytest.approx(float(kb.mean()), rel=1e-6)
    assert metrics["reward/index/mean"] == 2.5 and metrics["reward/index/odd"] == 0.5
    assert set(metrics) == {"reward/small/mean", "reward/large/mean", "reward/index/mean", "reward/index/odd"}


def test_concat_keeps_terms_in_image_order():
    a = RewardOutput(torch.tensor([1.0]), {}, {"x": [1.0], "y": [2.0]})
    b = RewardOutput(torch.tensor([2.0, 3.0]), {}, {"x": [3.0, 4.0], "y": [5.0, 6.0]})
    joined = RewardOutput.concat([a, b])
    assert joined.terms == {"x": [1.0, 3.0, 4.0], "y": [2.0, 5.0, 6.0]}
    assert joined.metrics() == {"reward/x/mean": 8.0 / 3, "reward/y/mean": 13.0 / 3}


@pytest.mark.ray
@pytest.mark.slow
def test_terms_come_back_from_ray_reward_workers(make_images):
    ray = pytest.importorskip("ray")
    terms = {
        "small": {"builtin": "jpeg_compressibility", "weight": 2.0},
        "large": {"builtin": "jpeg_incompressibility", "weight": 0.25},
    }
    images = make_images(2, 3)
    with build_reward_manager(RewardConfig(pool="thread", num_workers=1, reward_functions=terms)) as manager:
        expected = manager.score(_batch(images))
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never join another run's Ray
    try:
        config = RewardConfig(pool="ray", num_workers=2, num_cpus_per_worker=0.5, timeout_s=60, reward_functions=terms)
        with build_reward_manager(config) as manager:
            out = manager.score(_batch(images), step=2)
    finally:
        ray.shutdown()
    assert torch.equal(out.scores, expected.scores)
    assert out.terms == expected.terms and out.metrics() == expected.metrics()
    assert set(out.metrics()) == {"reward/small/mean", "reward/large/mean"}
