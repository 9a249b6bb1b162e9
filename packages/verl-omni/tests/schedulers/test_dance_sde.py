"""DanceGRPO's `dance_sde` transition: the reference's worked numbers in fp64, the exact Gaussian log-density, and the
identity with the `sde` mean at `std_dev_t := η`."""

from __future__ import annotations

import math

import pytest
import torch

from verl_omni.schedulers.flow_match_sde import FlowMatchSDEDiscreteScheduler, gaussian_log_prob, sde_transition

F64 = torch.float64


def t64(values):
    return torch.tensor(values, dtype=F64)


def test_dance_sde_step_matches_the_worked_example():
    """σ = 0.8 → 0.6, η = 1.2 (ref/algorithms.md §4.6 b): s = std_dev_t = η·√(σ − σ') = 0.536656, two scalar-latent
    rows; old and new log-probs at x' = μ_old + s·z, to 1e-6 as the reference prints them."""
    x, v_old, z = t64([[0.5], [-0.4]]), t64([[-0.3], [0.2]]), t64([[0.7], [-1.3]])
    mean, s, sd = sde_transition(x, v_old, t64(0.8), t64(0.6), t64(0.9), 1.2, "dance_sde")
    assert s.item() == pytest.approx(1.2 * math.sqrt(0.2), abs=1e-15) and torch.equal(s, sd)
    torch.testing.assert_close(mean, t64([[0.4808], [-0.3752]]), atol=1e-12, rtol=0)
    x_next = mean + s * z
    torch.testing.assert_close(gaussian_log_prob(x_next, mean, s), t64([-0.541541, -1.141541]), atol=1e-6, rtol=0)
    mean_new, _, _ = sde_transition(x, v_old + 0.01, t64(0.8), t64(0.6), t64(0.9), 1.2, "dance_sde")
    torch.testing.assert_close(gaussian_log_prob(x_next, mean_new, s), t64([-0.544629, -1.135834]), atol=1e-6, rtol=0)


def test_dance_sde_is_the_sde_mean_with_a_constant_std_and_an_exact_log_density():
    """The mean is the `sde` formula with `std_dev_t` replaced by η (no 1/(1 − σ): finite at σ = 1); the log-prob is
    the closed-form normal log-density averaged over elements; noise 0 is the Euler step."""
    gen = torch.Generator().manual_seed(0)
    x, v = torch.randn(3, 5, generator=gen, dtype=F64), torch.randn(3, 5, generator=gen, dtype=F64)
    for sigma, sigma_next in [(1.0, 0.9), (0.55, 0.4)]:
        eta, dt = 0.7, sigma_next - sigma
        mean, s, _ = sde_transition(x, v, t64(sigma), t64(sigma_next), t64(0.9), eta, "dance_sde")
        expected = x + dt * v + eta**2 * dt / (2 * sigma) * (x + (1 - sigma) * v)
        torch.testing.assert_close(mean, expected, atol=1e-14, rtol=0)
        x_next = mean + s * torch.randn(3, 5, generator=gen, dtype=F64)
        closed = -((x_next - mean) ** 2) / (2 * s**2) - torch.log(s) - 0.5 * math.log(2 * math.pi)
        torch.testing.assert_close(gaussian_log_prob(x_next, mean, s), closed.mean(dim=1), atol=1e-14, rtol=0)
        euler, _, _ = sde_transition(x, v, t64(sigma), t64(sigma_next), t64(0.9), 0.0, "dance_sde")
        assert torch.equal(euler, x + dt * v)


def test_scheduler_steps_and_rescores_dance_sde():
    """Through `step`: a drawn sample rescored with `prev_sample` gives the same log-prob (the trainer's recompute)."""
    sched = FlowMatchSDEDiscreteScheduler(sde_type="dance_sde", noise_level=1.2)
    sched.set_timesteps(6)
    x, v = torch.randn(2, 4, 8, 8, dtype=F64), torch.randn(2, 4, 8, 8, dtype=F64)
    gen = torch.Generator().manual_seed(3)
    out = sched.step(v, sched.timesteps[2], x, generator=gen, step_index=2)
    again = sched.step(v, sched.timesteps[2], x, prev_sample=out.prev_sample, step_index=2)
    torch.testing.assert_close(again.log_prob, out.log_prob, atol=1e-12, rtol=0)
    assert torch.equal(out.std, out.std_dev_t)  # the step std itself, not a·√(σ/(1−σ))
