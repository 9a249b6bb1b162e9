"""Tests for `verl_omni.algos.flow_grpo`: E6, T6, T7, T9 (and the E1/E3/E7 KL numbers) of docs/omni/math.md."""

from __future__ import annotations

import math

import pytest
import torch

from verl_omni.algos import (
    flow_grpo_policy_loss,
    kl_penalty,
    kl_penalty_exact,
    kl_penalty_historical,
    rollout_consistency_metrics,
)

F64 = torch.float64


def _e6():
    adv = torch.tensor([2.0, 2.0, -1.5, -1.5, 7.0], dtype=F64)
    old = torch.full((5,), -0.4, dtype=F64)
    new = (old + torch.tensor([5e-5, 3e-4, 3e-4, -3e-4, 0.0], dtype=F64)).requires_grad_(True)
    return adv, old, new


def test_policy_loss_reproduces_e6():
    adv, old, new = _e6()
    out = flow_grpo_policy_loss(new.double(), old, adv, clip_ratio=1e-4, adv_clip_max=5.0)
    assert out.loss.item() == pytest.approx(-1.199999987, abs=1e-9)
    out.loss.backward()
    per_elem_grad = new.grad * 5  # d mean / d ℓ_i = (d L_i / d ℓ_i) / B
    torch.testing.assert_close(
        per_elem_grad, torch.tensor([-2.000100003, 0.0, 1.500450068, 0.0, -5.0], dtype=F64), atol=1e-9, rtol=0
    )
    assert out.metrics["pg_clipfrac"].item() == pytest.approx(0.6)
    assert out.metrics["pg_clipfrac_higher"].item() == pytest.approx(0.4)
    assert out.metrics["pg_clipfrac_lower"].item() == pytest.approx(0.2)
    assert out.metrics["ratio_max"].item() == pytest.approx(1.000300045, abs=1e-6)
    assert out.metrics["ratio_min"].item() == pytest.approx(0.999700045, abs=1e-6)


def test_policy_loss_per_element_values_e6():
    adv, old, new = _e6()
    # evaluate each element as a batch of one: the mean is then the element itself
    expected = [-2.000100003, -2.0002, 1.500450068, 1.49985, -5.0]
    for i, want in enumerate(expected):
        out = flow_grpo_policy_loss(
            new[i : i + 1].detach(), old[i : i + 1], adv[i : i + 1], clip_ratio=1e-4, adv_clip_max=5.0
        )
        assert out.loss.item() == pytest.approx(want, abs=1e-6)


def test_policy_loss_on_policy_ratio_one_and_gradient_is_minus_mean_adv_grad():
    """T6: θ = θ_old gives ρ ≡ 1, loss = −mean(Â) and ∇loss = −mean(Â·∇ℓ)."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(3, 4, generator=gen, dtype=F64, requires_grad=True)
    feats = torch.randn(6, 4, generator=gen, dtype=F64)
    adv = torch.tensor([0.5, -1.0, 6.0, -7.0, 0.0, 2.0], dtype=F64)
    adv_hat = adv.clamp(-5, 5)

    def log_prob(weight):
        return -((feats @ weight.T) ** 2).mean(dim=1)

    old = log_prob(w).detach()
    out = flow_grpo_policy_loss(log_prob(w), old, adv, clip_ratio=1e-4, adv_clip_max=5.0)
    assert out.metrics["ratio_mean"].item() == 1.0 and out.metrics["pg_clipfrac"].item() == 0.0
    torch.testing.assert_close(out.loss, -adv_hat.mean())
    (grad,) = torch.autograd.grad(out.loss, w)
    (expected,) = torch.autograd.grad(-(adv_hat * log_prob(w)).mean(), w)
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize(
    ("adv", "delta", "clipped"),
    [
        pytest.param(1.0, 3e-4, True, id="A>0 rho above"),
        pytest.param(1.0, -3e-4, False, id="A>0 rho below"),
        pytest.param(-1.0, -3e-4, True, id="A<0 rho below"),
        pytest.param(-1.0, 3e-4, False, id="A<0 rho above"),
        pytest.param(2.0, 5e-5, False, id="inside"),
    ],
)
def test_policy_loss_clip_zeroes_gradient_only_outside_trust_region(adv, delta, clipped):
    """T7: zero gradient for Â>0, ρ>1+ε or Â<0, ρ<1−ε; otherwise −Â·ρ."""
    old = torch.tensor([-0.3], dtype=F64)
    new = (old + delta).requires_grad_(True)
    out = flow_grpo_policy_loss(new, old, torch.tensor([adv], dtype=F64), clip_ratio=1e-4, adv_clip_max=5.0)
    out.loss.backward()
    want = 0.0 if clipped else -adv * math.exp(delta)
    assert new.grad.item() == pytest.approx(want, abs=1e-6)


def test_policy_loss_adds_kl_with_coefficient():
    lp = torch.zeros(4)
    kl = torch.tensor(0.25)
    out = flow_grpo_policy_loss(lp, lp, torch.ones(4), clip_ratio=1e-4, adv_clip_max=5.0, kl=kl, kl_coef=0.04)
    assert out.loss.item() == pytest.approx(-1.0 + 0.01)
    assert out.kl.item() == 0.25 and out.pg_loss.item() == -1.0


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"clip_ratio": 0.0}, r"clip_ratio: expected a float > 0"),
        ({"adv_clip_max": -1.0}, r"adv_clip_max: expected a float > 0"),
        ({"advantages": torch.zeros(3)}, r"expected equal shapes"),
    ],
)
def test_policy_loss_rejects_bad_input(kwargs, pattern):
    args = {"clip_ratio": 1e-4, "adv_clip_max": 5.0, "advantages": torch.zeros(2), **kwargs}
    with pytest.raises(ValueError, match=pattern):
        flow_grpo_policy_loss(torch.zeros(2), torch.zeros(2), args.pop("advantages"), **args)


# ---- KL (E1, E3, T9) -------------------------------------------------------------------------------------------

X = torch.tensor([1.0, -0.5, 0.25, 2.0], dtype=F64)
V = torch.tensor([0.5, 1.0, -1.0, 0.0], dtype=F64)
DV = torch.tensor([0.01, -0.02, 0.0, 0.03], dtype=F64)


def _sde_mean(x, v, sigma, sigma_next, a, sigma_1=None):
    """Reference sde transition (docs/omni/math.md §2), float64, for the KL identity tests."""
    dt = sigma_next - sigma
    s_tilde = sigma if sigma < 1 else sigma_1
    std_dev_t = a * math.sqrt(sigma / (1 - s_tilde))
    mean = x + dt * v + (std_dev_t**2 * dt / (2 * sigma)) * (x + (1 - sigma) * v)
    return mean, std_dev_t, std_dev_t * math.sqrt(-dt)


def _cps_mean(x, v, sigma, sigma_next, a):
    s = sigma_next * math.sin(a * math.pi / 2)
    r = math.sqrt(sigma_next**2 - s**2)
    return (1 - sigma_next) * (x - sigma * v) + r * (x + (1 - sigma) * v), s


def test_kl_historical_and_exact_reproduce_e1():
    mu, std_dev_t, s = _sde_mean(X, V, 0.6, 0.4, 0.7)
    mu_new, _, _ = _sde_mean(X, V + DV, 0.6, 0.4, 0.7)
    args = (mu_new[None], mu[None])
    assert kl_penalty_historical(*args, torch.tensor(std_dev_t)).item() == pytest.approx(1.476214e-05, rel=1e-6)
    assert kl_penalty_exact(*args, torch.tensor(s)).item() == pytest.approx(7.381071e-05, rel=1e-6)
    assert kl_penalty_exact(*args, torch.tensor(s), reduction="sum").item() == pytest.approx(2.952429e-04, rel=1e-6)
    assert kl_penalty("historical", *args, torch.tensor(std_dev_t), torch.tensor(s)).item() == pytest.approx(
        1.476214e-05, rel=1e-6
    )


def test_kl_historical_equals_exact_for_cps_e3():
    mu, s = _cps_mean(X, V, 0.6, 0.4, 0.7)
    mu_new, _ = _cps_mean(X, V + DV, 0.6, 0.4, 0.7)
    hist = kl_penalty_historical(mu_new[None], mu[None], torch.tensor(s))
    exact = kl_penalty_exact(mu_new[None], mu[None], torch.tensor(s))
    assert hist.item() == pytest.approx(1.1376627e-04, rel=1e-6)
    assert exact.item() == pytest.approx(hist.item(), rel=1e-12)


@pytest.mark.parametrize(("sigma", "sigma_next", "a"), [(0.6, 0.4, 0.7), (0.9, 0.75, 1.2), (0.3, 0.05, 0.5)])
def test_kl_sde_identity_closed_form_and_code_scale(sigma, sigma_next, a):
    """T9: ‖Δμ‖²/(2s²) = (h/2)(σ_t(1−σ)/(2σ) + 1/σ_t)²‖Δv‖², and KL_code = h·KL_exact/D."""
    gen = torch.Generator().manual_seed(1)
    x, v, dv = (torch.randn(3, 64, generator=gen, dtype=F64) for _ in range(3))
    mu, std_dev_t, s = _sde_mean(x, v, sigma, sigma_next, a)
    mu_new, _, _ = _sde_mean(x, v + dv, sigma, sigma_next, a)
    h = sigma - sigma_next
    exact_sum = kl_penalty_exact(mu_new, mu, torch.tensor(s, dtype=F64), reduction="sum")
    paper = (h / 2) * (std_dev_t * (1 - sigma) / (2 * sigma) + 1 / std_dev_t) ** 2 * (dv**2).sum(dim=1).mean()
    torch.testing.assert_close(exact_sum, paper, rtol=1e-12, atol=0)
    code = kl_penalty_historical(mu_new, mu, torch.tensor(std_dev_t, dtype=F64))
    torch.testing.assert_close(code, h * exact_sum / x.shape[1], rtol=1e-12, atol=0)


def test_kl_accepts_per_sample_std_and_carries_gradient():
    mu = torch.zeros(2, 3, 4, requires_grad=True)
    ref = torch.ones(2, 3, 4)
    kl = kl_penalty_historical(mu, ref, torch.tensor([1.0, 2.0]))
    assert kl.item() == pytest.approx((0.5 + 0.125) / 2)
    kl.backward()
    assert mu.grad is not None and mu.grad.abs().sum() > 0


def test_kl_rejects_unknown_type_and_reduction():
    t = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=r"kl_type: expected 'historical' or 'exact', got 'k3'"):
        kl_penalty("k3", t, t, torch.tensor(1.0), torch.tensor(1.0))
    with pytest.raises(ValueError, match=r"reduction: expected 'mean' or 'sum'"):
        kl_penalty_exact(t, t, torch.tensor(1.0), reduction="max")


def test_rollout_consistency_metrics():
    m = rollout_consistency_metrics(torch.tensor([[1.0, 2.0]]), torch.tensor([[1.5, 1.0]]))
    assert m["rollout_logprob_diff_mean"].item() == pytest.approx(0.75)
    assert m["rollout_logprob_diff_max"].item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="expected equal shapes"):
        rollout_consistency_metrics(torch.zeros(2), torch.zeros(3))
