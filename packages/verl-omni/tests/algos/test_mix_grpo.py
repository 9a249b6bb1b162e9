"""MixGRPO's loss: FlowGRPO's clipped surrogate averaged over the window steps (algorithms.md §2.4), fp64, 1e-6.

The window schedule that picks those steps is tested in tests/rollout/test_sde_window.py.

Mutations run by hand (each edited into `flow_grpo_policy_loss` in `verl_omni/algos/flow_grpo.py`, this file,
tests/algos/test_flow_grpo.py and tests/algos/test_dance_grpo.py run, then restored):

* `torch.maximum(unclipped, clipped)` → `torch.minimum`: FAILED both tests here, both DanceGRPO loss tests, E6 and the
  clip tests of test_flow_grpo.py.
* the lower clip bound `1 − ε` → `1 − 2ε`: FAILED `test_mix_grpo_loss_second_example_of_three_samples`, the
  DanceGRPO worked example and E6 (the loss tolerances here are rel 1e-6: abs 1e-6 was 1-3 % of these losses).
"""

from __future__ import annotations

import pytest
import torch

from verl_omni.algos import compute_flow_grpo_advantages, flow_grpo_policy_loss

#: the worked examples' advantages in fp64, (r − mean) / (unbiased std + 1e-4)
A1 = [0.7070067953266834, -0.7070067953266834]
A2 = [-0.9488878024190774, -0.09488878024190772, 1.0437765826609853]


def _window_loss(rewards, log_ratios, adv64, clip_ratio=1e-4):
    """What the engine optimises: the mean over window steps of each step's loss (a mean over samples).

    The advantages come back from `compute_flow_grpo_advantages` (computed in fp64, returned fp32); the loss is
    evaluated on the by-hand fp64 advantages `adv64`: its terms (~1) cancel to ~1e-4, so fp32 advantages would move it
    by ~3e-4 relative, more than the 1e-6 checked here.
    """
    rewards = torch.tensor(rewards, dtype=torch.float64)
    adv = compute_flow_grpo_advantages(rewards, [0] * len(rewards)).double()
    ratios = torch.tensor(log_ratios, dtype=torch.float64)
    old = torch.zeros(ratios.shape[0], dtype=torch.float64)
    a64 = torch.tensor(adv64, dtype=torch.float64)
    steps = [flow_grpo_policy_loss(ratios[:, j], old, a64, clip_ratio=clip_ratio, adv_clip_max=5.0) for j in range(2)]
    loss = sum(s.loss for s in steps) / len(steps)
    clipfrac = sum(s.metrics["pg_clipfrac"] for s in steps) / len(steps)
    return adv, loss, clipfrac


def test_mix_grpo_loss_matches_the_worked_example():
    """§2.6 (b): rewards (1, 0) → A = ±0.707007; window log-ratios (2e-5, −3e-4), (5e-4, −1e-5): L = 1.361e-4,
    clip fraction 0.5 (ρ = e^{−3e-4} and e^{5e-4} leave [1 − ε, 1 + ε] on the unclipped side)."""
    adv, loss, clipfrac = _window_loss([1.0, 0.0], [[2e-5, -3e-4], [5e-4, -1e-5]], A1)
    torch.testing.assert_close(adv, torch.tensor([0.7070068, -0.7070068], dtype=torch.float64), atol=1e-6, rtol=0)
    assert loss.item() == pytest.approx(1.3611292620141e-4, rel=1e-6)
    assert round(loss.item(), 7) == 1.361e-4 and clipfrac.item() == pytest.approx(0.5)


def test_mix_grpo_loss_second_example_of_three_samples():
    """By hand: rewards (0.2, 0.5, 0.9), one group: A = (−0.948888, −0.094889, 1.043777); log-ratios per window
    step (1e-4, −5e-5), (−2e-4, 3e-4), (4e-5, −1.5e-4), ε = 1e-4. Terms max(−Aρ, −A·clip ρ): 0.948983, 0.948840,
    0.094879 (clipped), 0.094917, −1.043819, −1.043620 (clipped) → mean 3.0206e-5."""
    adv, loss, _ = _window_loss([0.2, 0.5, 0.9], [[1e-4, -5e-5], [-2e-4, 3e-4], [4e-5, -1.5e-4]], A2)
    torch.testing.assert_close(
        adv, torch.tensor([-0.9488878, -0.0948888, 1.0437766], dtype=torch.float64), atol=1e-6, rtol=0
    )
    assert loss.item() == pytest.approx(3.020586573987405e-05, rel=1e-6)
