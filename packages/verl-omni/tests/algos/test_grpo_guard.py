"""Tests for `verl_omni.algos.grpo_guard` (docs/omni/math.md §9, E10, E11, T14, T15), fp64 on the CPU.

The transition means come from the project's own `sde_transition` (the sampler's math); log-probs are the
mean-reduced Gaussian log-densities of the stored transition `x' = μ_old + s·z`.

Mutations run by hand (each edited into `verl_omni/algos/grpo_guard.py`, these tests run, then restored):

* RatioNorm skipped (`return log_ratio, bias, scale` in `grpo_guard_ratio_norm`, i.e. FlowGRPO's ratio): FAILED
  `test_worked_example_of_algorithms_md` (ρ̃ 0.997704 ≠ 0.998934), `test_second_example_three_regimes`,
  `test_ratio_is_exp_of_mean_z_dmu_and_its_gradient`,
  `test_on_policy_gradient_is_flow_grpo_times_a_positive_per_step_scale` (the factor becomes 1/|dt|, not
  σ_t/√(−dt)) and the registered-loss test.
* the bias `b` detached (`bias = (diff.detach()**2)...`): FAILED only
  `test_ratio_is_exp_of_mean_z_dmu_and_its_gradient` (the gradient is z/D − Δμ/(sD) instead of z/D); the loss
  values still pass, which is why that test exists.
* the ÷|dt| dropped (`step_scale = 1`): FAILED `test_worked_example_of_algorithms_md` (2.327e-5 ≠ 2.327e-4),
  `test_second_example_three_regimes`, `test_on_policy_gradient_is_flow_grpo_times_a_positive_per_step_scale` and
  the registered-loss test.
* `s̄` per sample instead of the batch mean (`scale = std_dev_t * sqrt_dt`): FAILED
  `test_the_step_scale_is_the_batch_mean` and `test_worked_example_of_algorithms_md` (`scale.item()` of a (2,) tensor).
* the KL term divided by |dt| too (`pg_loss + kl_coef * kl * step_scale`): FAILED
  `test_the_kl_term_is_added_after_the_dt_division_and_needs_the_reference_means`.
* In the trainer (tests/trainer/test_grpo_guard_trainer.py): the normalised log-ratio negated: margin −71.9.
"""

from __future__ import annotations

import math

import pytest
import torch

from verl_omni.algos import (
    PolicyLossInput,
    flow_grpo_policy_loss,
    get_loss,
    grpo_guard_policy_loss,
    grpo_guard_ratio_norm,
    loss_spec,
)
from verl_omni.config import DiffusionActorConfig
from verl_omni.schedulers.flow_match_sde import sde_transition

F64 = torch.float64
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def _log_prob(x_next: torch.Tensor, mean: torch.Tensor, s: float) -> torch.Tensor:
    return (-((x_next - mean) ** 2) / (2 * s * s) - math.log(s) - HALF_LOG_2PI).mean(dim=1)


def _step(x, v_old, dv, z, sigma, sigma_next, a):
    """One `sde` step: μ_old, μ_θ (differentiable through `dv`), x' = μ_old + s·z, and the scheduler's std/σ_t."""
    sig, sig_n = _t(sigma), _t(sigma_next)
    mu_old, s, std_dev_t = sde_transition(_t(x), _t(v_old), sig, sig_n, sig, a, "sde")
    dv = _t(dv).requires_grad_(True)
    mu_theta, _, _ = sde_transition(_t(x), _t(v_old) + dv, sig, sig_n, sig, a, "sde")
    x_next = mu_old + s * _t(z)
    b = x_next.shape[0]
    return {
        "mu_old": mu_old,
        "mu_theta": mu_theta,
        "dv": dv,
        "log_prob": _log_prob(x_next, mu_theta, s.item()),
        "old_log_prob": _log_prob(x_next, mu_old, s.item()),
        "std_dev_t": std_dev_t.expand(b),
        "sqrt_dt": (s / std_dev_t).expand(b),
        "s": s.item(),
        "z": _t(z),
    }


def _loss(step, adv, *, clip_ratio, adv_clip_max=5.0):
    return grpo_guard_policy_loss(
        step["log_prob"],
        step["old_log_prob"],
        _t(adv),
        step["mu_theta"],
        step["mu_old"],
        step["std_dev_t"],
        step["sqrt_dt"],
        clip_ratio=clip_ratio,
        adv_clip_max=adv_clip_max,
    )


def _worked_example():
    """algorithms.md §3.6: σ 0.6 → 0.5, a = 1.2, 2 samples, D = 2, rewards (1, 0) → A = ±0.707007, ε = 1e-3."""
    return _step(
        x=[[0.3, -0.5], [0.1, 0.2]],
        v_old=[[0.2, 0.1], [-0.3, 0.4]],
        dv=[[0.010, -0.004], [0.004, 0.016]],
        z=[[0.8, -1.1], [-0.4, 0.9]],
        sigma=0.6,
        sigma_next=0.5,
        a=1.2,
    )


def test_worked_example_of_algorithms_md():
    step = _worked_example()
    assert step["std_dev_t"][0].item() == pytest.approx(1.469694, abs=1e-6)
    assert step["s"] == pytest.approx(0.464758, abs=1e-6)
    torch.testing.assert_close(step["mu_old"], _t([[0.2116, -0.4272], [0.1336, 0.0952]]), atol=1e-12, rtol=0)
    log_ratio = (step["log_prob"] - step["old_log_prob"]).detach()
    torch.testing.assert_close(log_ratio, _t([-0.0022985, -0.0023779]), atol=1e-7, rtol=0)
    norm, bias, scale = grpo_guard_ratio_norm(
        step["log_prob"], step["old_log_prob"], step["mu_theta"], step["mu_old"], step["std_dev_t"], step["sqrt_dt"]
    )
    torch.testing.assert_close(bias.detach(), _t([3.972e-6, 9.313e-6]), atol=1e-9, rtol=0)
    assert scale.item() == pytest.approx(step["s"], abs=1e-12)
    torch.testing.assert_close(norm.detach().exp(), _t([0.998934, 0.998900]), atol=1e-6, rtol=0)

    out = _loss(step, [0.707007, -0.707007], clip_ratio=1e-3)
    assert out.loss.item() == pytest.approx(2.327e-4, rel=1e-3)  # the doc's four digits
    # to 1e-6 relative: sample 1 unclipped (−A·ρ̃), sample 2 clipped (−A·(1−ε)), mean, ÷|dt| = ÷0.1
    rho1 = math.exp(norm[0].item())
    expected = (-0.707007 * rho1 + 0.707007 * (1 - 1e-3)) / 2 / 0.1
    assert out.loss.item() == pytest.approx(expected, rel=1e-6)
    assert out.metrics["pg_clipfrac"].item() == 1.0  # both below 1 − ε; only sample 1 (A > 0) keeps a gradient
    # plain FlowGRPO on the same step: 4.581e-4 (the doc)
    plain = flow_grpo_policy_loss(step["log_prob"], step["old_log_prob"], _t([0.707007, -0.707007]),
                                  clip_ratio=1e-3, adv_clip_max=5.0)  # fmt: skip
    assert plain.loss.item() == pytest.approx(4.581e-4, rel=1e-3)
    # the reported raw statistics stay those of the raw log-ratio
    assert out.metrics["ppo_kl"].item() == pytest.approx(-log_ratio.mean().item(), rel=1e-12)
    assert out.metrics["step_loss_scale"].item() == pytest.approx(10.0, rel=1e-12)


def test_second_example_three_regimes():
    """My own: σ 0.8 → 0.55, a = 0.7 (σ_t = 1.4, √(−dt) = 0.5, s = 0.7 exactly), 3 samples, D = 3, ε = 5e-4,
    adv_clip_max = 2. Sample 1 (A = 1.5, ρ̃ = 0.998031 < 1−ε): unclipped −1.497046; sample 2 (A = −0.8, ρ̃ =
    0.999678 inside the band): unclipped 0.799743; sample 3 (A = 7 → 2, ρ̃ = 1.005149 > 1+ε): clipped −2.001.
    L = mean / 0.25 = −3.597737728 (FlowGRPO on the same step: −0.899026896)."""
    step = _step(
        x=[[0.4, -0.2, 0.9], [-0.7, 0.3, 0.1], [0.2, 0.5, -0.6]],
        v_old=[[0.1, -0.3, 0.5], [0.6, 0.0, -0.2], [-0.4, 0.2, 0.3]],
        dv=[[0.030, -0.020, 0.010], [0.002, -0.001, 0.003], [-0.025, 0.015, -0.01]],
        z=[[1.2, 0.7, -0.3], [0.5, -0.9, 0.4], [0.9, -1.4, 0.6]],
        sigma=0.8,
        sigma_next=0.55,
        a=0.7,
    )
    assert (step["std_dev_t"][0].item(), step["sqrt_dt"][0].item()) == pytest.approx((1.4, 0.5), abs=1e-12)
    out = _loss(step, [1.5, -0.8, 7.0], clip_ratio=5e-4, adv_clip_max=2.0)
    assert out.loss.item() == pytest.approx(-3.59773772811, rel=1e-6)
    assert out.metrics["ratio_min"].item() == pytest.approx(0.99803069, abs=1e-6)
    assert out.metrics["ratio_max"].item() == pytest.approx(1.00514883, abs=1e-6)
    assert out.metrics["pg_clipfrac"].item() == pytest.approx(2 / 3)
    assert out.metrics["ratio_norm_bias"].item() == pytest.approx((4.61316964e-05 + 4.61316964e-07
                                                                   + 3.13036511e-05) / 3, rel=1e-6)  # fmt: skip
    plain = flow_grpo_policy_loss(step["log_prob"], step["old_log_prob"], _t([1.5, -0.8, 7.0]),
                                  clip_ratio=5e-4, adv_clip_max=2.0)  # fmt: skip
    assert plain.loss.item() == pytest.approx(-0.899026896497, rel=1e-6)
    # gradient: only samples 1 and 2 carry one (sample 3 is clipped)
    out.loss.backward()
    assert step["dv"].grad[2].abs().max().item() == 0.0
    assert step["dv"].grad[:2].abs().min().item() > 0


def test_ratio_is_exp_of_mean_z_dmu_and_its_gradient():
    """algorithms.md §3.4: with x' = μ_old + s·z, ρ̃ = exp(mean(z ⊙ Δμ)) and dρ̃/dμ_θ = ρ̃·z/D (b carries gradient)."""
    step = _worked_example()
    dmu = step["mu_theta"] - step["mu_old"]
    norm, _, _ = grpo_guard_ratio_norm(
        step["log_prob"], step["old_log_prob"], step["mu_theta"], step["mu_old"], step["std_dev_t"], step["sqrt_dt"]
    )
    expected = (step["z"] * dmu).mean(dim=1)
    torch.testing.assert_close(norm, expected, atol=1e-15, rtol=1e-12)
    mu = step["mu_theta"]
    (grad,) = torch.autograd.grad(norm.exp().sum(), mu)
    torch.testing.assert_close(grad, norm.exp().detach()[:, None] * step["z"] / 2, atol=1e-12, rtol=1e-10)


def test_on_policy_gradient_is_flow_grpo_times_a_positive_per_step_scale():
    """The first update (θ = θ_old, Δμ = 0): ρ̃ = 1 exactly, nothing clipped, and the gradient is FlowGRPO's times
    s̄/|dt| = σ_t/√(−dt) > 0: the same direction per step (algorithms.md §3.4: exp(s̄·(0 + 0)) = 1; the guard
    only re-weights steps against each other)."""
    step = _worked_example()
    zero = [[0.0, 0.0], [0.0, 0.0]]
    on = _step(x=[[0.3, -0.5], [0.1, 0.2]], v_old=[[0.2, 0.1], [-0.3, 0.4]], dv=zero,
               z=[[0.8, -1.1], [-0.4, 0.9]], sigma=0.6, sigma_next=0.5, a=1.2)  # fmt: skip
    adv = [0.707007, -0.707007]
    guard = _loss(on, adv, clip_ratio=1e-4)
    assert guard.metrics["ratio_min"].item() == guard.metrics["ratio_max"].item() == 1.0
    assert guard.metrics["pg_clipfrac"].item() == 0.0 and guard.metrics["ratio_norm_bias"].item() == 0.0
    (g_guard,) = torch.autograd.grad(guard.loss, on["dv"])
    on2 = _step(x=[[0.3, -0.5], [0.1, 0.2]], v_old=[[0.2, 0.1], [-0.3, 0.4]], dv=zero,
                z=[[0.8, -1.1], [-0.4, 0.9]], sigma=0.6, sigma_next=0.5, a=1.2)  # fmt: skip
    plain = flow_grpo_policy_loss(on2["log_prob"], on2["old_log_prob"], _t(adv), clip_ratio=1e-4, adv_clip_max=5.0)
    (g_plain,) = torch.autograd.grad(plain.loss, on2["dv"])
    factor = step["std_dev_t"][0].item() / step["sqrt_dt"][0].item()  # s̄ / |dt| = σ_t·√(−dt) / (−dt)
    assert factor > 0
    torch.testing.assert_close(g_guard, factor * g_plain, atol=1e-12, rtol=1e-10)
    assert g_plain.abs().max().item() > 0


def test_the_step_scale_is_the_batch_mean():
    """Upstream's s̄ = mean_B(σ_t)·mean_B(√(−dt)), one scalar per micro-batch and step (not per sample)."""
    lp = torch.zeros(2, dtype=F64, requires_grad=True)
    mean = torch.zeros(2, 3, dtype=F64)
    _, _, scale = grpo_guard_ratio_norm(lp, lp.detach() - 0.01, mean, mean, _t([1.0, 3.0]), _t([0.2, 0.4]))
    assert scale.shape == () and scale.item() == pytest.approx(2.0 * 0.3, rel=1e-12)


def test_registered_with_its_needs_and_sampler():
    spec = loss_spec("grpo_guard")
    assert spec.needs == frozenset({"old_prev_sample_mean"}) and spec.sde_types == ("sde",)
    assert loss_spec("flow_grpo").needs == frozenset() and loss_spec("flow_grpo").sde_types is None


def test_registered_loss_derives_sqrt_dt_and_rejects_missing_means_or_a_deterministic_step():
    step = _worked_example()
    config = DiffusionActorConfig(diffusion_loss={"loss_mode": "grpo_guard", "clip_ratio": 1e-3})
    inputs = PolicyLossInput(
        log_prob=step["log_prob"],
        old_log_prob=step["old_log_prob"],
        advantages=_t([0.707007, -0.707007]),
        prev_sample_mean=step["mu_theta"],
        std_dev_t=step["std_dev_t"],
        std=step["std_dev_t"] * step["sqrt_dt"],
        old_prev_sample_mean=step["mu_old"],
    )
    assert get_loss("grpo_guard")(inputs, config).loss.item() == pytest.approx(2.327e-4, rel=1e-3)
    inputs.old_prev_sample_mean = None
    with pytest.raises(ValueError, match=r"old_prev_sample_mean: actor\.diffusion_loss\.loss_mode='grpo_guard'"):
        get_loss("grpo_guard")(inputs, config)
    inputs.old_prev_sample_mean = step["mu_old"]
    inputs.std_dev_t = torch.zeros(2, dtype=F64)
    with pytest.raises(ValueError, match=r"rollout\.algo\.noise_level=0"):
        get_loss("grpo_guard")(inputs, config)


@pytest.mark.parametrize(
    ("override", "key", "message"),
    [
        ("actor_rollout_ref.rollout.algo.sde_type=cps", r"actor_rollout_ref\.rollout\.algo\.sde_type",
         r"'cps': actor_rollout_ref\.actor\.diffusion_loss\.loss_mode='grpo_guard' holds only for sde_type in "
         r"\['sde'\]"),
        ("algorithm.rollout_correction.bypass_mode=true", r"algorithm\.rollout_correction\.bypass_mode",
         r"true: actor_rollout_ref\.actor\.diffusion_loss\.loss_mode='grpo_guard' needs the old policy's transition "
         r"means"),
    ],
)  # fmt: skip
def test_the_trainer_config_rejects_incompatible_combinations_naming_both_keys(override, key, message):
    from verl_core.config import ConfigValueError
    from verl_omni.trainer.config import load_config

    mode = "actor_rollout_ref.actor.diffusion_loss.loss_mode=grpo_guard"
    assert load_config([mode]).actor_rollout_ref.actor.diffusion_loss.clip_ratio == 1e-4  # upstream's default
    load_config([override])  # each alone is fine with flow_grpo
    with pytest.raises(ConfigValueError, match=key + r".*" + message):
        load_config([mode, override])


def test_the_kl_term_is_added_after_the_dt_division_and_needs_the_reference_means():
    """Decision (math.md §9): `L = L^guard (÷|dt|) + β·KL`, the KL of §5 not divided by |dt|."""
    step = _worked_example()
    ref = step["mu_old"] + 0.01
    config = DiffusionActorConfig(
        use_kl_loss=True, kl_loss_coef=0.5, diffusion_loss={"loss_mode": "grpo_guard", "clip_ratio": 1e-3}
    )
    inputs = PolicyLossInput(
        log_prob=step["log_prob"],
        old_log_prob=step["old_log_prob"],
        advantages=_t([0.707007, -0.707007]),
        prev_sample_mean=step["mu_theta"],
        std_dev_t=step["std_dev_t"],
        std=step["std_dev_t"] * step["sqrt_dt"],
        old_prev_sample_mean=step["mu_old"],
        ref_prev_sample_mean=ref,
    )
    out = get_loss("grpo_guard")(inputs, config)
    kl = ((step["mu_theta"].detach() - ref) ** 2 / (2 * step["std_dev_t"][0] ** 2)).mean().item()  # historical
    assert out.kl.item() == pytest.approx(kl, rel=1e-12)
    assert out.loss.item() == pytest.approx(out.pg_loss.item() + 0.5 * kl, rel=1e-12)
    assert out.pg_loss.item() == pytest.approx(2.327e-4, rel=1e-3)
    inputs.ref_prev_sample_mean = None
    with pytest.raises(ValueError, match=r"ref_prev_sample_mean: actor\.use_kl_loss is true"):
        get_loss("grpo_guard")(inputs, config)
