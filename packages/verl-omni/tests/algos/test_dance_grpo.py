"""DanceGRPO: the per-sample step subset (`timestep_subset_mask`) and its loss/advantages on algorithms.md §4.6,
fp64, 1e-6 (relative on the loss)."""

from __future__ import annotations

import pytest
import torch

from verl_omni.algos import compute_flow_grpo_advantages, flow_grpo_policy_loss
from verl_omni.algos.dance_grpo import timestep_subset_mask, timesteps_per_sample


@pytest.mark.parametrize(
    ("steps", "fraction", "expected"),
    [
        pytest.param(15, 0.6, 9, id="worked-T16"),  # §4.6 (e): T = 16, the last step not trained: ⌊15·0.6⌋ = 9
        pytest.param(3, 0.5, 1, id="quickstart"),  # by hand: ⌊1.5⌋
        pytest.param(4, 0.1, 1, id="at-least-one"),  # ⌊0.4⌋ = 0 → 1
        pytest.param(10, 1.0, 10, id="all"),
    ],
)
def test_timesteps_per_sample(steps, fraction, expected):
    assert timesteps_per_sample(steps, fraction) == expected


def test_subset_mask_has_m_steps_per_row_differs_between_rows_and_replays_from_the_seed():
    mask = timestep_subset_mask(64, 15, 0.6, torch.Generator().manual_seed(7))
    assert mask.shape == (64, 15) and mask.dtype == torch.bool
    assert mask.sum(dim=1).tolist() == [9] * 64
    assert len({tuple(row.tolist()) for row in mask}) > 32  # per-sample subsets, not one for the batch
    assert mask.float().mean(dim=0).min() > 0.4 and mask.float().mean(dim=0).max() < 0.8  # each step ~ 9/15
    assert torch.equal(mask, timestep_subset_mask(64, 15, 0.6, torch.Generator().manual_seed(7)))


@pytest.mark.parametrize(("steps", "fraction"), [(0, 0.5), (3, 0.0), (3, 1.5)])
def test_bad_subset_arguments_are_refused(steps, fraction):
    with pytest.raises(ValueError, match=r"num_steps|algorithm\.timestep_fraction"):
        timesteps_per_sample(steps, fraction)


def test_dance_grpo_advantages_and_loss_match_the_worked_example():
    """§4.6 (a) and (c): rewards A (0.30, 0.34), B (0.20, 0.40) with the global batch std → (∓0.237633, ∓1.188164);
    the dance_sde log-probs of (b) give ρ = (0.996917, 1.005724), both clipped at ε = 1e-4: L = −1.188e-4."""
    rewards = torch.tensor([0.30, 0.34, 0.20, 0.40], dtype=torch.float64)
    adv = compute_flow_grpo_advantages(rewards, [0, 0, 1, 1], global_std=True).double()
    expected = torch.tensor([-0.23763279, 0.23763279, -1.18816397, 1.18816397], dtype=torch.float64)
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    old = torch.tensor([-0.54154113, -1.14154113], dtype=torch.float64)
    new = torch.tensor([-0.54462912, -1.13583392], dtype=torch.float64)
    out = flow_grpo_policy_loss(new, old, adv[2:], clip_ratio=1e-4, adv_clip_max=5.0)
    assert out.loss.item() == pytest.approx(-1.1881639655986209e-4, rel=1e-6)
    assert out.metrics["pg_clipfrac"].item() == 1.0


def test_dance_grpo_loss_second_example_per_group_std():
    """By hand, per-group std (`algorithm.global_std=false`, DanceGRPO's own estimator up to its 1e-8):
    group A (0.30, 0.34): std 0.04/√2, A = ∓0.02/(0.028284 + 1e-4) = ∓0.704616; group B (0.20, 0.40):
    A = ∓0.1/(0.141421 + 1e-4) = ∓0.706607. Group B with log-ratios (5e-5, −2e-4), ε = 1e-4: sample 1
    (A < 0) ρ = 1.00005 inside the clip range, term −Aρ = 0.706642; sample 2 (A > 0) ρ = 0.9998 below 1 − ε,
    max(−Aρ, −A(1 − ε)) = −Aρ = −0.706466 (unclipped); L = 8.8319e-5."""
    rewards = torch.tensor([0.30, 0.34, 0.20, 0.40], dtype=torch.float64)
    adv = compute_flow_grpo_advantages(rewards, [0, 0, 1, 1], global_std=False).double()
    expected = torch.tensor([-0.70461559, 0.70461559, -0.70660713, 0.70660713], dtype=torch.float64)
    torch.testing.assert_close(adv, expected, atol=1e-6, rtol=0)
    log_ratio = torch.tensor([5e-5, -2e-4], dtype=torch.float64)
    out = flow_grpo_policy_loss(
        log_ratio, torch.zeros(2, dtype=torch.float64), adv[2:], clip_ratio=1e-4, adv_clip_max=5.0
    )
    assert out.loss.item() == pytest.approx(8.831926784780286e-05, rel=1e-6)
    assert out.metrics["pg_clipfrac"].item() == 0.5  # ρ = 0.9998 is outside [1 − ε, 1 + ε] (as §2.6 counts it)
