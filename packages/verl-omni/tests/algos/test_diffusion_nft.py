"""Tests for `verl_omni.algos.diffusion_nft` (docs/omni/math.md §DiffusionNFT), fp64 on the CPU, to 1e-6.

Mutations run by hand (each edited into `verl_omni/algos/diffusion_nft.py`, these tests run, then restored):

* v⁻ built like v⁺ (`v_pos, v_neg = v_old + step, v_old + step`): FAILED the worked example, the second example,
  the on-policy gradient test and the registered-loss test.
* the adaptive weights left in the graph (`w_pos = e_pos.abs()...` without `.detach()`): FAILED only
  `test_on_policy_gradient_is_reward_weighted_flow_matching` (the values still match, the gradient does not).
* the ÷β dropped (`per_sample = p * l_pos + (1.0 - p) * l_neg`): FAILED the worked example (0.3892 ≠ 3.8925), the
  on-policy gradient test and the registered-loss test (not the second example, whose β is 1).
* p without the ½ offset (`a / (2.0 * adv_clip_max)` in `nft_optimality`): FAILED the worked example,
  `test_optimality_and_adv_modes` and the registered-loss test.
"""

from __future__ import annotations

import math

import pytest
import torch

from verl_omni.algos import (
    ForwardLossInput,
    apply_adv_mode,
    compute_flow_grpo_advantages,
    diffusion_nft_policy_loss,
    get_loss,
    loss_spec,
    nft_optimality,
    old_policy_decay,
    select_train_timesteps,
)
from verl_omni.config import DiffusionActorConfig

F64 = torch.float64


def _t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=F64)


def _reference(v, v_old, x0, eps, t, p, *, beta, c, wmin, v_ref=None, lam=0.0) -> float:
    """The loss of math.md written with Python floats, element by element (independent of the tensor code)."""
    total, ref = 0.0, 0.0
    for i in range(len(v)):
        d = len(v[i])
        u = [eps[i][k] - x0[i][k] for k in range(d)]
        vp = [beta * v[i][k] + (1 - beta) * v_old[i][k] for k in range(d)]
        vn = [(1 + beta) * v_old[i][k] - beta * v[i][k] for k in range(d)]
        ep = [t[i] * (u[k] - vp[k]) for k in range(d)]
        en = [t[i] * (u[k] - vn[k]) for k in range(d)]
        wp = max(sum(abs(e) for e in ep) / d, wmin)
        wn = max(sum(abs(e) for e in en) / d, wmin)
        lp = sum(e * e for e in ep) / d / wp
        ln = sum(e * e for e in en) / d / wn
        total += (p[i] * lp + (1 - p[i]) * ln) / beta
        if v_ref is not None:
            ref += sum((v[i][k] - v_ref[i][k]) ** 2 for k in range(d)) / d
    n = len(v)
    return c * total / n + lam * ref / n


# algorithms.md §1.6
X0 = [[0.5, -0.2], [-0.3, 0.4]]
EPS = [[1.0, 0.0], [-0.5, 0.5]]
V_OLD = [[0.35, 0.30], [-0.05, 0.00]]
V = [[0.45, 0.22], [-0.12, 0.02]]
V_REF = [[0.30, 0.30], [0.0, 0.0]]


def test_worked_example_of_algorithms_md():
    adv = compute_flow_grpo_advantages(_t([0.9, 0.3]), torch.tensor([0, 0]))
    assert adv.tolist() == pytest.approx([0.706940, -0.706940], abs=1e-6)
    p = nft_optimality(apply_adv_mode(adv, "continuous", 5.0), 5.0)
    assert p.tolist() == pytest.approx([0.570694, 0.429306], abs=1e-6)
    out = diffusion_nft_policy_loss(
        _t(V), _t(V_OLD), _t(X0), _t(EPS), _t([0.6, 0.6]), p,
        mix_beta=0.1, adv_clip_max=5.0, adaptive_weight_min=1e-5, ref_velocity=_t(V_REF), ref_kl_coef=1e-4,
    )  # fmt: skip
    assert out.loss.dtype == F64
    assert out.pg_loss.item() == pytest.approx(3.892495, abs=1e-6)
    assert out.kl.item() == pytest.approx(0.010925, abs=1e-6)
    assert out.loss.item() == pytest.approx(3.8924957, abs=1e-6)
    # mean L⁺ = mean(0.072579, 0.074821), mean L⁻ = mean(0.083427, 0.081204)
    assert out.metrics["nft_loss_pos"].item() == pytest.approx(0.073700, abs=1e-6)
    assert out.metrics["nft_loss_neg"].item() == pytest.approx(0.0823155, abs=1e-6)
    assert out.metrics["nft_velocity_gap_max"].item() == pytest.approx(0.1, abs=1e-12)


def test_second_example_floored_weight_beta_one_three_samples():
    """β = 1 (the paper's), c = 2, three samples at different t, D = 3, one sample whose positive error is below the
    weight floor (w⁺ = adaptive_weight_min), no reference term. By hand (docs/omni/math.md): (L⁺, L⁻) per row =
    (1.62e-9, 0.18), (0.11, 0.11), (0.04, 0.08); ℓ = (0.036, 0.11, 0.076); loss = 2 · 0.074 = 0.148 (+8.6e-10)."""
    x0 = [[0.2, -0.1, 0.4], [0.0, 0.3, -0.2], [-0.5, 0.5, 0.1]]
    eps = [[0.7, 0.2, -0.3], [-0.4, 0.1, 0.6], [0.3, -0.2, 0.0]]
    v_old = [[0.6, 0.4, -0.8], [-0.3, -0.2, 0.7], [0.9, -0.6, -0.2]]
    # row 0: v_θ = v_old + tiny, and u − v_old ≈ −0.1: e⁺ = t(u − v⁺) is ~1e-7 per element only for row 0's v⁺
    u0 = [eps[0][k] - x0[0][k] for k in range(3)]
    v = [[u0[0] + 1e-7, u0[1] - 1e-7, u0[2] + 2e-7], [-0.1, -0.3, 0.9], [0.6, -0.9, 0.1]]
    t = [0.9, 0.5, 0.2]
    p = [0.8, 0.5, 0.1]
    want = _reference(v, v_old, x0, eps, t, p, beta=1.0, c=2.0, wmin=1e-5)
    out = diffusion_nft_policy_loss(
        _t(v), _t(v_old), _t(x0), _t(eps), _t(t), _t(p), mix_beta=1.0, adv_clip_max=2.0, adaptive_weight_min=1e-5
    )
    assert out.kl is None
    assert out.loss.item() == pytest.approx(want, abs=1e-6)
    assert out.loss.item() == pytest.approx(0.148, abs=1e-6)
    # β = 1: v⁺ = v_θ, so row 0's positive error is t·(u − v_θ) ≈ 1e-7 < the floor: L⁺_0 = mean(e²)/1e-5 ≈ 0
    e_pos = [0.9 * (u0[k] - v[0][k]) for k in range(3)]
    assert sum(abs(e) for e in e_pos) / 3 < 1e-5


def test_on_policy_gradient_is_reward_weighted_flow_matching():
    """At θ = θ_old (v_θ = v_old), ∂L/∂v_θ = c·(2p_i − 1)/B · ∂L_FM,i/∂v with L_FM = mean(e²)/w (w held fixed),
    e = t·(u − v): good samples (p > ½) pull v onto the flow-matching target, bad ones push it away, p = ½ nothing."""
    v_old = _t(V_OLD)
    v = v_old.clone().requires_grad_(True)
    p = _t([0.9, 0.5])
    t = _t([0.6, 0.3])
    out = diffusion_nft_policy_loss(
        v, v_old, _t(X0), _t(EPS), t, p, mix_beta=0.1, adv_clip_max=5.0, adaptive_weight_min=1e-5
    )
    (grad,) = torch.autograd.grad(out.loss, v)
    e = t[:, None] * (_t(EPS) - _t(X0) - v_old)
    w = e.abs().mean(1, keepdim=True)
    d_fm = -2 * t[:, None] * e / (2 * w)  # ∂(mean_D e²/w)/∂v with D = 2
    want = 5.0 * (2 * p[:, None] - 1) / 2 * d_fm
    torch.testing.assert_close(grad, want, atol=1e-12, rtol=0)
    assert torch.all(grad[1] == 0)  # p = ½
    assert out.metrics["nft_loss_pos"] == out.metrics["nft_loss_neg"]  # v⁺ = v⁻ = v_old bit for bit


def test_optimality_and_adv_modes():
    a = _t([-7.0, -2.5, 0.0, 1.0, 6.0])
    assert apply_adv_mode(a, "continuous", 5.0).tolist() == [-5.0, -2.5, 0.0, 1.0, 5.0]
    assert apply_adv_mode(a, "positive_only", 5.0).tolist() == [0.0, 0.0, 0.0, 1.0, 5.0]
    assert apply_adv_mode(a, "negative_only", 5.0).tolist() == [-5.0, -2.5, 0.0, 0.0, 0.0]
    assert apply_adv_mode(a, "one_only", 5.0).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
    assert apply_adv_mode(a, "binary", 5.0).tolist() == [-1.0, -1.0, 0.0, 1.0, 1.0]
    assert nft_optimality(a, 5.0).tolist() == pytest.approx([0.0, 0.25, 0.5, 0.6, 1.0], abs=1e-12)
    with pytest.raises(ValueError, match=r"algorithm\.adv_mode: expected one of"):
        apply_adv_mode(a, "all", 5.0)


def test_old_policy_decay_schedules():
    assert old_policy_decay(10, "copy") == 0.0
    assert old_policy_decay(10, "linear_to_0_5") == pytest.approx(0.01)
    assert old_policy_decay(900, "linear_to_0_5") == 0.5
    assert old_policy_decay(74, "delayed_linear_to_0_999") == 0.0
    assert old_policy_decay(95, "delayed_linear_to_0_999") == pytest.approx(0.15)
    assert old_policy_decay(10_000, "delayed_linear_to_0_999") == 0.999
    assert old_policy_decay(3, "copy", 0.9) == 0.9  # a fixed decay wins
    with pytest.raises(ValueError, match=r"old_policy_decay_schedule: expected one of"):
        old_policy_decay(1, "ema")
    with pytest.raises(ValueError, match=r"algorithm\.old_policy_decay: expected null or a float in \[0, 1\)"):
        old_policy_decay(1, "copy", 1.0)


def test_select_train_timesteps_keeps_a_sorted_subset_per_row():
    grid = torch.tensor([[1000.0, 750.0, 500.0, 250.0]] * 3)
    assert torch.equal(select_train_timesteps(grid, 1.0, torch.Generator().manual_seed(0)), grid)
    part = select_train_timesteps(grid, 0.5, torch.Generator().manual_seed(0))
    assert part.shape == (3, 2)
    for row in part.tolist():
        assert set(row) <= {1000.0, 750.0, 500.0, 250.0} and row == sorted(row, reverse=True)
    assert select_train_timesteps(grid, 0.1, torch.Generator().manual_seed(0)).shape == (3, 1)  # at least one
    again = select_train_timesteps(grid, 0.5, torch.Generator().manual_seed(0))
    assert torch.equal(part, again)


def test_registered_loss_reads_the_config_and_needs_the_old_velocity():
    spec = loss_spec("diffusion_nft")
    assert spec.trains_on == "clean" and not spec.needs_log_probs and spec.needs == {"old_velocity"}
    config = DiffusionActorConfig(
        diffusion_loss={"loss_mode": "diffusion_nft", "mix_beta": 0.1, "ref_kl_coef": 1e-4, "adv_clip_max": 5.0}
    )
    adv = compute_flow_grpo_advantages(_t([0.9, 0.3]), torch.tensor([0, 0]))
    inputs = ForwardLossInput(
        velocity=_t(V), clean_latents=_t(X0), noise=_t(EPS), sigma=_t([0.6, 0.6]), advantages=adv,
        old_velocity=_t(V_OLD), ref_velocity=_t(V_REF),
    )  # fmt: skip
    assert get_loss("diffusion_nft")(inputs, config).loss.item() == pytest.approx(3.8924957, abs=1e-6)
    inputs.ref_velocity = None
    with pytest.raises(ValueError, match=r"ref_velocity: actor\.diffusion_loss\.ref_kl_coef > 0 needs"):
        get_loss("diffusion_nft")(inputs, config)
    inputs.old_velocity = None
    with pytest.raises(ValueError, match=r"old_velocity: actor\.diffusion_loss\.loss_mode='diffusion_nft' needs"):
        get_loss("diffusion_nft")(inputs, config)
    assert math.isfinite(config.diffusion_loss.adaptive_weight_min)


@pytest.mark.parametrize(
    "overrides, key, message",
    [
        (["algorithm.rollout_correction.bypass_mode=true"], "algorithm.rollout_correction.bypass_mode",
         r"true: actor_rollout_ref\.actor\.diffusion_loss\.loss_mode='diffusion_nft' trains on clean samples"),
        (["actor_rollout_ref.actor.use_kl_loss=true"], "actor_rollout_ref.actor.use_kl_loss",
         r"diffusion_nft.*use actor_rollout_ref\.actor\.diffusion_loss\.ref_kl_coef"),
        (["actor_rollout_ref.actor.diffusion_loss.ref_kl_coef=0.1", "actor_rollout_ref.model.lora_rank=0"],
         "actor_rollout_ref.actor.diffusion_loss.ref_kl_coef", r"actor_rollout_ref\.model\.lora_rank=0"),
        (["actor_rollout_ref.rollout.pipeline.true_cfg_scale=4.0"], "actor_rollout_ref.rollout.pipeline.true_cfg_scale",
         r"diffusion_nft.*without CFG"),
    ],
)  # fmt: skip
def test_the_trainer_config_rejects_diffusion_nft_with_incompatible_keys(override_check, overrides, key, message):
    override_check(["actor_rollout_ref.model.algorithm=diffusion_nft", *overrides], key, message)


@pytest.mark.parametrize(
    "override, key",
    [
        ("algorithm.adv_mode=binary", "algorithm.adv_mode"),
        ("algorithm.trainer_type=direct_preference", "algorithm.trainer_type"),
    ],
)
def test_the_trainer_config_rejects_nft_keys_with_a_transition_loss(override_check, override, key):
    override_check([override], key, r"holds only for a loss that trains on clean samples.*loss_mode='flow_grpo'")


@pytest.fixture
def override_check():
    from verl_core.config import ConfigValueError
    from verl_omni.trainer.config import load_config

    def check(overrides, key, message):
        with pytest.raises(ConfigValueError, match=message) as info:
            load_config(["actor_rollout_ref.model.path=/tmp", *overrides], config_name="quickstart")
        assert info.value.key == key

    return check
