"""Tests for `verl_omni.algos.flow_dppo` (docs/omni/math.md §Flow-DPPO), fp64 on the CPU.

Transition means and stds come from the project's own `sde_transition`; log-probs are the mean-reduced Gaussian
log-densities of the stored transition `x' = μ_old + s·z`.

Mutations run by hand (each edited into `verl_omni/algos/flow_dppo.py`, these tests run, then restored):

* the direction condition dropped (`drop = far`): FAILED `test_worked_example_of_algorithms_md` (the corrective
  sample 2 is dropped too), `test_second_example_by_hand` and
  `test_the_registered_loss_uses_the_scheduler_std_and_its_keys`.
* `s²` ignored (`s2 = 1.0`): FAILED the same three tests.
* the KL compared with `>` instead of `>=`: FAILED `test_second_example_by_hand` (its sample at D = τ exactly).
* the advantage clipped like FlowGRPO (`.clamp(-5, 5)`): FAILED `test_the_advantage_is_not_clipped`.
"""

from __future__ import annotations

import math

import pytest
import torch

from verl_omni.algos import PolicyLossInput, flow_dppo_policy_loss, get_loss, loss_spec
from verl_omni.config import DiffusionActorConfig
from verl_omni.schedulers.flow_match_sde import sde_transition

F64 = torch.float64
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def _log_prob(x_next: torch.Tensor, mean: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    s = s.reshape(-1, *([1] * (x_next.dim() - 1)))
    return (-((x_next - mean) ** 2) / (2 * s * s) - torch.log(s) - HALF_LOG_2PI).flatten(1).mean(dim=1)


def _worked_example():
    """algorithms.md §5.6: σ = 0.6 → 0.5, a = 1.2 (s = 0.464758); μ_old, Δμ, z scalar per sample."""
    sig = _t([0.6] * 4)
    _, s, std_dev_t = sde_transition(_t([[0.0]] * 4), _t([[0.0]] * 4), sig, _t([0.5] * 4), sig, 1.2, "sde")
    s = s.reshape(4)
    mu_old = _t([[0.10], [-0.20], [0.05], [0.30]])
    dmu = _t([[0.004], [-0.003], [0.0035], [0.001]])
    z = _t([[0.5], [0.5], [-0.8], [1.0]])
    x_next = mu_old + s[:, None] * z
    mu = (mu_old + dmu).requires_grad_(True)
    return mu, mu_old, s, std_dev_t.reshape(4), x_next, _t([1.2, 0.4, -0.9, -0.7])


def test_worked_example_of_algorithms_md():
    """§5.6: ρ = (1.004275, 0.996757, 0.993965, 1.002152), D = (3.704e-5, 2.083e-5, 2.836e-5, 2.315e-6),
    drop = (yes, no, yes, no), terms = (0, −0.398703, 0, 0.701506), L = 0.075701, masked fraction ½."""
    mu, mu_old, s, _, x_next, adv = _worked_example()
    assert s[0].item() == pytest.approx(0.464758, abs=1e-6)
    lp, old_lp = _log_prob(x_next, mu, s), _log_prob(x_next, mu_old, s)
    out = flow_dppo_policy_loss(lp, old_lp, adv, mu, mu_old, s, kl_mask_threshold=1e-5)
    assert out.loss.item() == pytest.approx(0.075701, abs=1e-6)
    rho = torch.exp(lp - old_lp).detach()
    assert rho.tolist() == pytest.approx([1.004275, 0.996757, 0.993965, 1.002152], abs=1e-6)
    assert out.metrics["masked_fraction"].item() == 0.5
    assert out.metrics["kl_mask_fraction"].item() == 0.75
    assert out.metrics["kl_new_old_max"].item() == pytest.approx(3.704e-5, rel=1e-3)
    expected = (0.4 * rho[1] * -1 + 0.7 * rho[3]) / 4
    assert out.loss.item() == pytest.approx(expected.item(), abs=1e-12)
    # only the kept items carry a gradient: ∂L/∂ℓ_θ,i = −A_i ρ_i / 4 for kept i, 0 for dropped
    out.loss.backward()
    g = mu.grad.squeeze(1)
    assert g[0].item() == 0.0 and g[2].item() == 0.0 and g[1].item() != 0.0 and g[3].item() != 0.0


def test_second_example_by_hand():
    """4 samples, 2-element latents, s = (1, 1, 1, ½), τ = 0.125 (binary-exact numbers), by hand:

    Δμ = [(1, 1), (½, ½), (¼, ¼), (1, 0)] ⇒ D = mean Δμ² / (2s²) = (0.5, 0.125, 0.03125, 1.0);
    log-ratios given directly: (0.02, −0.03, 0.05, −0.01); A = (1, −2, 0.5, 0.3).
    sample 0: D ≥ τ, ρ > 1, A > 0 ⇒ dropped. sample 1: D = τ exactly, ρ < 1, A < 0 ⇒ dropped.
    sample 2: D < τ ⇒ kept: −0.5·e^0.05. sample 3: D ≥ τ but corrective (ρ < 1, A > 0) ⇒ kept: −0.3·e^−0.01.
    L = (−0.5·e^0.05 − 0.3·e^−0.01) / 4 = −0.205663; masked fraction ½, KL-mask fraction ¾.
    """
    mu_old = torch.zeros(4, 2, dtype=F64)
    mu = _t([[1.0, 1.0], [0.5, 0.5], [0.25, 0.25], [1.0, 0.0]])
    old_lp = torch.zeros(4, dtype=F64)
    lp = _t([0.02, -0.03, 0.05, -0.01])
    adv = _t([1.0, -2.0, 0.5, 0.3])
    out = flow_dppo_policy_loss(lp, old_lp, adv, mu, mu_old, _t([1.0, 1.0, 1.0, 0.5]), kl_mask_threshold=0.125)
    assert out.loss.item() == pytest.approx((-0.5 * math.exp(0.05) - 0.3 * math.exp(-0.01)) / 4, abs=1e-12)
    assert out.loss.item() == pytest.approx(-0.205663, abs=1e-6)
    assert out.metrics["kl_new_old_mean"].item() == pytest.approx((0.5 + 0.125 + 0.03125 + 1.0) / 4, abs=1e-12)
    assert out.metrics["masked_fraction"].item() == 0.5 and out.metrics["kl_mask_fraction"].item() == 0.75
    # add_kl_coefficient=false: D = mean Δμ² / 2 = (0.5, 0.125, 0.03125, 0.25): the same items are dropped
    raw = flow_dppo_policy_loss(lp, old_lp, adv, mu, mu_old, None, kl_mask_threshold=0.125)
    assert raw.metrics["kl_new_old_mean"].item() == pytest.approx((0.5 + 0.125 + 0.03125 + 0.25) / 4, abs=1e-12)
    assert raw.loss.item() == pytest.approx(out.loss.item(), abs=1e-15)


def test_on_policy_first_update_is_the_plain_policy_gradient():
    """ρ = 1 and D = 0 on-policy: nothing is masked and L = −mean A (the first mini-batch after the old pass)."""
    _, mu_old, s, _, x_next, adv = _worked_example()
    lp = _log_prob(x_next, mu_old, s)
    out = flow_dppo_policy_loss(lp, lp.detach(), adv, mu_old, mu_old, s, kl_mask_threshold=1e-5)
    assert out.metrics["ratio_mean"].item() == 1.0 and out.metrics["masked_fraction"].item() == 0.0
    assert out.metrics["kl_new_old_max"].item() == 0.0
    assert out.loss.item() == pytest.approx(-adv.mean().item(), abs=1e-15)


def test_the_advantage_is_not_clipped():
    lp = _t([0.0, 0.0])
    mu = _t([[0.0], [0.0]])
    out = flow_dppo_policy_loss(lp, lp, _t([40.0, -2.0]), mu, mu, _t([1.0, 1.0]), kl_mask_threshold=1e-5)
    assert out.loss.item() == pytest.approx(-19.0, abs=1e-12)


def test_the_registered_loss_uses_the_scheduler_std_and_its_keys():
    assert loss_spec("flow_dppo").needs == frozenset({"old_prev_sample_mean"})
    assert loss_spec("flow_dppo").sde_types == ("sde",)
    mu, mu_old, s, std_dev_t, x_next, adv = _worked_example()
    lp, old_lp = _log_prob(x_next, mu, s), _log_prob(x_next, mu_old, s)
    inputs = PolicyLossInput(
        log_prob=lp,
        old_log_prob=old_lp,
        advantages=adv,
        prev_sample_mean=mu,
        std_dev_t=std_dev_t,
        std=s,
        old_prev_sample_mean=mu_old,
    )
    config = DiffusionActorConfig(diffusion_loss={"loss_mode": "flow_dppo"})
    assert get_loss("flow_dppo")(inputs, config).loss.item() == pytest.approx(0.075701, abs=1e-6)
    off = DiffusionActorConfig(diffusion_loss={"loss_mode": "flow_dppo", "add_kl_coefficient": False})
    assert get_loss("flow_dppo")(inputs, off).metrics["kl_new_old_max"].item() == pytest.approx(0.004**2 / 2, rel=1e-9)
    with pytest.raises(ValueError, match="old_prev_sample_mean"):
        get_loss("flow_dppo")(PolicyLossInput(**{**vars(inputs), "old_prev_sample_mean": None}), config)
    with pytest.raises(ValueError, match="kl_mask_threshold"):
        DiffusionActorConfig(diffusion_loss={"loss_mode": "flow_dppo", "kl_mask_threshold": -1.0})
