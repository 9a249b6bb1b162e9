"""Tests for `verl_omni.algos.advantages`: example E5 and property T10 of docs/omni/math.md (§6)."""

from __future__ import annotations

import math

import pytest
import torch

from verl_omni.algos import compute_flow_grpo_advantages, group_index

E5_REWARDS = torch.tensor([1.0, 2.0, 4.0, 0.5, 0.5, 0.8])
E5_GROUPS = ["a", "a", "a", "b", "b", "b"]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {"std_estimator": "population"},
            [-1.0747318, -0.2686829, 1.3434147, -0.0806049, -0.0806049, 0.1612098],
            id="FG global_std",
        ),
        pytest.param(
            {"std_estimator": "population", "global_std": False},
            [-1.0689593, -0.2672398, 1.3361991, -0.7066071, -0.7066071, 1.4132143],
            id="FG per-group std",
        ),
        pytest.param(
            {"std_repeat": 1},
            [-0.9810983, -0.2452746, 1.2263729, -0.0735824, -0.0735824, 0.1471647],
            id="VO global T1",
        ),
        pytest.param(
            {"std_repeat": 2},
            [-1.0289809, -0.2572452, 1.2862261, -0.0771736, -0.0771736, 0.1543471],
            id="VO global T2",
        ),
        pytest.param(
            {"std_repeat": 2, "global_std": False},
            [-0.9758286, -0.2439572, 1.2197858, -0.6450808, -0.6450808, 1.2901617],
            id="VO per-group T2",
        ),
        pytest.param(
            {"norm_adv_by_std_in_grpo": False},
            [-1.3333333, -0.3333333, 1.6666667, -0.1, -0.1, 0.2],
            id="Dr.GRPO",
        ),
    ],
)
def test_advantages_reproduce_e5(kwargs, expected):
    adv = compute_flow_grpo_advantages(E5_REWARDS, E5_GROUPS, **kwargs)
    assert adv.dtype == torch.float32 and adv.shape == (6,)
    torch.testing.assert_close(adv, torch.tensor(expected), atol=1e-6, rtol=0)


def test_advantages_single_success_per_group_std_reproduces_e5():
    rewards = torch.zeros(10)
    rewards[9] = 1.0
    adv = compute_flow_grpo_advantages(rewards, [0] * 10, global_std=False, std_estimator="population")
    torch.testing.assert_close(adv, torch.tensor([-0.3332223] * 9 + [2.9990003]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("global_std", [True, False])
def test_advantages_have_zero_group_mean(global_std):
    gen = torch.Generator().manual_seed(0)
    rewards = torch.rand(24, generator=gen)
    groups = torch.arange(6).repeat_interleave(4)
    adv = compute_flow_grpo_advantages(rewards, groups, global_std=global_std).double()
    means = torch.zeros(6, dtype=torch.float64).index_add_(0, groups, adv) / 4
    torch.testing.assert_close(means, torch.zeros(6, dtype=torch.float64), atol=1e-6, rtol=0)


@pytest.mark.parametrize("global_std", [True, False])
def test_advantages_identical_rewards_in_a_group_are_zero(global_std):
    rewards = torch.tensor([3.0, 3.0, 3.0, 1.0, 2.0, 5.0])
    adv = compute_flow_grpo_advantages(rewards, [0, 0, 0, 1, 1, 1], global_std=global_std)
    assert torch.equal(adv[:3], torch.zeros(3))
    assert adv[3:].abs().min() > 0


def test_advantages_global_std_uses_one_scalar_for_the_batch():
    rewards = torch.tensor([1.0, 2.0, 4.0, 0.5, 0.5, 0.8, 7.0, 1.0])
    groups = [0, 0, 0, 1, 1, 1, 2, 2]
    adv = compute_flow_grpo_advantages(rewards, groups).double()
    centred = rewards.double() - torch.tensor([7 / 3] * 3 + [0.6] * 3 + [4.0] * 2, dtype=torch.float64)
    scale = centred / adv
    assert torch.allclose(scale, scale[0].expand_as(scale), rtol=1e-6)
    torch.testing.assert_close(scale[0], rewards.double().std() + 1e-4, rtol=1e-6, atol=0)


@pytest.mark.parametrize("repeat", [1, 2, 5])
def test_advantages_unbiased_over_population_std_is_the_bt_correction(repeat):
    rewards, b = E5_REWARDS, E5_REWARDS.numel()
    pop = compute_flow_grpo_advantages(rewards, E5_GROUPS, std_estimator="population", epsilon=0.0).double()
    unb = compute_flow_grpo_advantages(rewards, E5_GROUPS, std_repeat=repeat, epsilon=0.0).double()
    bt = b * repeat
    torch.testing.assert_close(pop / unb, torch.full((b,), math.sqrt(bt / (bt - 1)), dtype=torch.float64))


def test_advantages_group_of_one_is_zero():
    adv = compute_flow_grpo_advantages(torch.tensor([1.0, 5.0, 2.0]), ["x", "y", "y"], global_std=False)
    assert adv[0] == 0.0


def test_group_index_first_seen_order():
    assert group_index(["b", "a", "b", "c"]).tolist() == [0, 1, 0, 2]
    assert group_index(torch.tensor([7, 7, 3])).tolist() == [0, 0, 1]


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"rewards": torch.zeros(2, 2)}, r"rewards: expected shape \(B,\)"),
        ({"group_ids": [0, 0]}, r"group_ids: expected 3 ids"),
        ({"epsilon": -1.0}, r"epsilon: expected a float >= 0"),
        ({"std_repeat": 0}, r"std_repeat: expected an int >= 1"),
        ({"std_estimator": "biased"}, r"std_estimator: expected 'unbiased' or 'population'"),
    ],
)
def test_advantages_reject_bad_input(kwargs, pattern):
    args = {"rewards": torch.zeros(3), "group_ids": [0, 0, 1], **kwargs}
    with pytest.raises(ValueError, match=pattern):
        compute_flow_grpo_advantages(args.pop("rewards"), args.pop("group_ids"), **args)
