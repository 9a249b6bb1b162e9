"""Tests for `verl_omni.algos.diffusion_dpo` (docs/omni/math.md §Online Diffusion-DPO), fp64 on the CPU.

Mutations run by hand (each edited into `verl_omni/algos/diffusion_dpo.py`, these tests run, then restored):

* the sign of z flipped (`z = 0.5 * beta * (delta_w - delta_l)`): FAILED `test_worked_example_of_algorithms_md`,
  `test_second_example_two_pairs_by_hand`, `test_the_gradient_lowers_the_chosen_error_and_raises_the_rejected` and
  `test_the_registered_loss_refuses_broken_pairs_and_reads_dpo_beta`.
* β not halved (`z = -beta * (...)`): FAILED the same four tests.
* the reference term dropped (`delta = err`): FAILED those four and `test_policy_equal_to_reference_gives_log_2`.
* chosen = the worst (`pairs += [int(ranked[-1]), int(ranked[0])]`): FAILED `test_pairs_are_best_then_worst_per_group`.
* the pair check removed from the registered loss (`if False:`): FAILED
  `test_the_registered_loss_refuses_broken_pairs_and_reads_dpo_beta`.
"""

from __future__ import annotations

import math

import pytest
import torch

from verl_omni.algos import (
    ForwardLossInput,
    diffusion_dpo_policy_loss,
    dpo_train_sigmas,
    get_loss,
    loss_spec,
    select_preference_pairs,
)
from verl_omni.config import DiffusionActorConfig

F64 = torch.float64


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def _worked_example():
    """algorithms.md §6.6: x₀_w = 0.8, x₀_l = −0.2, ε = 0.3; v_θ = (−0.45, 0.47), v_ref = (−0.40, 0.49)."""
    return _t([[0.8], [-0.2]]), _t([[0.3], [0.3]]), _t([[-0.45], [0.47]]), _t([[-0.40], [0.49]])


def test_pairs_are_best_then_worst_per_group():
    """§6.6's rewards (0.20, 0.90, 0.50) give chosen #1, rejected #0; groups of one are skipped; ties keep the
    earliest as chosen and the latest as rejected (the pair is still trained, as upstream)."""
    assert select_preference_pairs(_t([0.20, 0.90, 0.50]), torch.tensor([0, 0, 0])).tolist() == [1, 0]
    rewards = _t([0.1, 0.7, 0.3, 0.5, 0.5, 0.5, 0.9, 0.2])
    groups = torch.tensor([3, 3, 3, 1, 1, 1, 7, 3])
    assert select_preference_pairs(rewards, groups).tolist() == [1, 0, 3, 5]  # group 7 has one sample


def test_no_pair_is_refused_naming_rollout_n():
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.rollout\.n >= 2"):
        select_preference_pairs(_t([0.1, 0.2]), torch.tensor([0, 1]))


def test_worked_example_of_algorithms_md():
    """§6.6: Δ_w = −0.0075, Δ_l = 0.0008; β = 100 ⇒ z = 0.415, L = 0.50702; β = 2000 ⇒ z = 8.3, L = 2.485e-4."""
    x0, eps, v, v_ref = _worked_example()
    out = diffusion_dpo_policy_loss(v, v_ref, x0, eps, beta=100.0)
    assert out.loss.dtype == F64
    assert out.metrics["dpo_reward_margin"].item() == pytest.approx(0.415, abs=1e-9)
    assert out.loss.item() == pytest.approx(math.log1p(math.exp(-0.415)), abs=1e-12)
    assert out.loss.item() == pytest.approx(0.50702, abs=1e-5)
    assert out.metrics["dpo_implicit_acc"].item() == 1.0
    assert out.metrics["dpo_reward_chosen"].item() == pytest.approx(0.375, abs=1e-9)  # −50·(−0.0075)
    assert out.metrics["dpo_reward_rejected"].item() == pytest.approx(-0.04, abs=1e-9)
    big = diffusion_dpo_policy_loss(v, v_ref, x0, eps, beta=2000.0)
    assert big.loss.item() == pytest.approx(2.485e-4, rel=1e-3)
    assert big.loss.item() == pytest.approx(math.log1p(math.exp(-8.3)), abs=1e-9)


def test_second_example_two_pairs_by_hand():
    """Two pairs, 2-element latents, β = 10 (by hand):

    pair 0: x₀_w = (1, 0), x₀_l = (0, 1), ε = (0.5, −0.5) ⇒ u_w = (−0.5, −0.5), u_l = (0.5, −1.5);
      v_θ(w) = (−0.4, −0.5): e = 0.005; v_ref(w) = (−0.3, −0.5): e = 0.02 ⇒ Δ_w = −0.015;
      v_θ(l) = (0.5, −1.3): e = 0.02; v_ref(l) = (0.5, −1.4): e = 0.005 ⇒ Δ_l = 0.015; z = −5·(−0.03) = 0.15.
    pair 1: x₀_w = (0, 0), x₀_l = (0, 0), ε = (1, 1) ⇒ u = (1, 1);
      v_θ(w) = (1.2, 1): e = 0.02, v_ref(w) = (1, 1): e = 0 ⇒ Δ_w = 0.02; v_θ(l) = v_ref(l) ⇒ Δ_l = 0; z = −0.1.
    L = (softplus(−0.15) + softplus(0.1)) / 2 = (0.620957 + 0.744397) / 2 = 0.682677; implicit accuracy ½.
    """
    x0 = _t([[1, 0], [0, 1], [0, 0], [0, 0]])
    eps = _t([[0.5, -0.5], [0.5, -0.5], [1, 1], [1, 1]])
    v = _t([[-0.4, -0.5], [0.5, -1.3], [1.2, 1.0], [0.7, 0.9]])
    v_ref = _t([[-0.3, -0.5], [0.5, -1.4], [1.0, 1.0], [0.7, 0.9]])
    out = diffusion_dpo_policy_loss(v, v_ref, x0, eps, beta=10.0)
    expected = (math.log1p(math.exp(-0.15)) + math.log1p(math.exp(0.1))) / 2
    assert out.loss.item() == pytest.approx(expected, abs=1e-12)
    assert out.loss.item() == pytest.approx(0.682677, abs=1e-6)
    assert out.metrics["dpo_implicit_acc"].item() == 0.5
    assert out.metrics["dpo_reward_margin"].item() == pytest.approx(0.025, abs=1e-12)
    assert out.metrics["dpo_reward_margin_max"].item() == pytest.approx(0.15, abs=1e-12)


def test_policy_equal_to_reference_gives_log_2():
    """The on-policy identity of the first update: θ = reference ⇒ Δ = 0, z = 0, L = log 2, margin 0."""
    g = torch.Generator().manual_seed(0)
    x0, eps, v = (torch.randn(6, 3, generator=g, dtype=F64) for _ in range(3))
    out = diffusion_dpo_policy_loss(v, v.clone(), x0, eps, beta=2000.0)
    assert out.loss.item() == pytest.approx(math.log(2), abs=1e-15)
    assert out.metrics["dpo_reward_margin"].item() == 0.0 and out.metrics["dpo_reward_margin_max"].item() == 0.0


def test_the_gradient_lowers_the_chosen_error_and_raises_the_rejected():
    """At θ = reference, −∂L/∂v_w = −(β/4)·∂e_w/∂v_w: a gradient step moves v_w toward u_w and v_l away from u_l."""
    x0, eps, _, v_ref = _worked_example()
    v = v_ref.clone().requires_grad_(True)
    diffusion_dpo_policy_loss(v, v_ref, x0, eps, beta=100.0).loss.backward()
    u = eps - x0
    # dL/dv_i = σ(−z)·(β/2)·(±1)·2(v_i − u_i)/D with z = 0, D = 1: = ±(β/2)(v_i − u_i)
    expected = 50.0 * (v_ref - u) * _t([[1.0], [-1.0]])
    assert torch.allclose(v.grad, expected, atol=1e-12)


def test_bad_inputs_are_refused():
    x0, eps, v, v_ref = _worked_example()
    with pytest.raises(ValueError, match="even"):
        diffusion_dpo_policy_loss(v[:1], v_ref[:1], x0[:1], eps[:1], beta=1.0)
    with pytest.raises(ValueError, match="dpo_beta"):
        diffusion_dpo_policy_loss(v, v_ref, x0, eps, beta=0.0)


def test_the_registered_loss_refuses_broken_pairs_and_reads_dpo_beta():
    assert loss_spec("dpo").trains_on == "pairs" and not loss_spec("dpo").needs_log_probs
    config = DiffusionActorConfig(diffusion_loss={"loss_mode": "dpo", "dpo_beta": 100.0})
    x0, eps, v, v_ref = _worked_example()
    sigma = _t([0.4, 0.4])
    args = dict(velocity=v, clean_latents=x0, noise=eps, sigma=sigma, advantages=_t([0.0, 0.0]))
    out = get_loss("dpo")(ForwardLossInput(**args, ref_velocity=v_ref), config)
    assert out.loss.item() == pytest.approx(0.50702, abs=1e-5)
    with pytest.raises(ValueError, match="ref_velocity"):
        get_loss("dpo")(ForwardLossInput(**args), config)
    with pytest.raises(ValueError, match="same noise"):
        get_loss("dpo")(ForwardLossInput(**{**args, "noise": _t([[0.3], [0.2]])}, ref_velocity=v_ref), config)
    with pytest.raises(ValueError, match="same noise"):
        get_loss("dpo")(ForwardLossInput(**{**args, "sigma": _t([0.4, 0.5])}, ref_velocity=v_ref), config)


def test_train_sigmas_are_on_the_1000_step_table_and_logit_normal():
    g = torch.Generator().manual_seed(3)
    s = dpo_train_sigmas(20000, g)
    assert s.shape == (20000,) and s.min() >= 1e-3 and s.max() <= 1.0
    assert torch.allclose((s.double() * 1000).round(), s.double() * 1000, atol=1e-4)  # σ = (1000 − k) / 1000
    assert abs(s.double().mean().item() - 0.5005) < 0.01  # logit-normal(0, 1) is symmetric about ½
    again = dpo_train_sigmas(20000, torch.Generator().manual_seed(3))
    assert torch.equal(s, again)
