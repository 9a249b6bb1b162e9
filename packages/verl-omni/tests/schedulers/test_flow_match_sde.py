"""FlowMatchSDEDiscreteScheduler: worked numbers E1-E4, E8 and properties T1-T5, T8, T9, T11-T13.

Every constant is an example or property of docs/omni/math.md (formulas in its §1-§5).
"""

import math

import numpy as np
import pytest
import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from verl_omni.schedulers import (
    FlowMatchSDEDiscreteScheduler,
    draw_sde_window,
    gaussian_log_prob,
    sde_transition,
)

F64 = torch.float64
X = [1.0, -0.5, 0.25, 2.0]
V = [0.5, 1.0, -1.0, 0.0]
Z = [0.5, -1.0, 1.5, 0.0]
V_NEW_DELTA = [0.01, -0.02, 0.0, 0.03]


def t64(values):
    return torch.tensor(values, dtype=F64)


def _step64(sigma, sigma_next, a, kind, sigma_one=0.9, v=V):
    x, vv, z = t64([X]), t64([v]), t64([Z])
    mean, s, sd = sde_transition(x, vv, t64(sigma), t64(sigma_next), t64(sigma_one), a, kind)
    return x, vv, z, mean, s, sd


def _scheduler_with_sigmas(sigmas, **kw):
    sched = FlowMatchSDEDiscreteScheduler(**kw)
    sched.set_timesteps(sigmas=sigmas)
    return sched


# ---- E1-E3 worked numbers ------------------------------------------------------------------------


def test_sde_step_e1_worked_numbers():
    x, v, z, mean, s, sd = _step64(0.6, 0.4, 0.7, "sde")
    assert sd.item() == pytest.approx(0.8573214099741122, abs=1e-15)
    assert s.item() == pytest.approx(0.38340579025361615, abs=1e-15)
    np.testing.assert_allclose(mean[0], [0.753, -0.68775, 0.468375, 1.755], atol=1e-14)
    x_next = mean + s * z
    np.testing.assert_allclose(x_next[0], [0.9447029, -1.0711558, 1.0434837, 1.755], atol=5e-8)
    lp = gaussian_log_prob(x_next, mean, s)
    assert lp.item() == pytest.approx(-0.39777718710297194, abs=1e-14)
    # sum reduction = D x mean (T5)
    assert (lp * 4).item() == pytest.approx(-1.5911087484118878, abs=1e-13)
    # per-element against the closed-form normal logpdf (T5)
    lam = -((x_next - mean) ** 2) / (2 * s**2) - torch.log(s) - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(lam[0], [-0.0852772, -0.4602772, -1.0852772, 0.0397228], atol=5e-8)
    # gradient through v, mean-reduced
    v_req = v.clone().requires_grad_(True)
    mean_g, _, _ = sde_transition(x, v_req, t64(0.6), t64(0.4), t64(0.9), 0.7, "sde")
    gaussian_log_prob(x_next, mean_g, s).sum().backward()
    np.testing.assert_allclose(v_req.grad[0], [-0.08118031, 0.16236062, -0.24354092, 0], atol=5e-9)
    # new policy at the same x'
    mean_new, _, _ = sde_transition(x, v + t64([V_NEW_DELTA]), t64(0.6), t64(0.4), t64(0.9), 0.7, "sde")
    np.testing.assert_allclose(mean_new[0], [0.75051, -0.68277, 0.468375, 1.74753], atol=1e-12)
    lp_new = gaussian_log_prob(x_next, mean_new, s)
    assert lp_new.item() == pytest.approx(-0.4019100131987692, abs=1e-14)
    assert (lp_new - lp).item() == pytest.approx(-0.004132826095797237, abs=1e-14)
    # KL conventions (E1 / E7 / T9)
    dmu = mean_new - mean
    kl_code = (dmu**2).mean() / (2 * sd**2)
    kl_exact_dim = (dmu**2).mean() / (2 * s**2)
    assert kl_code.item() == pytest.approx(1.476214e-05, rel=1e-6)
    assert kl_exact_dim.item() == pytest.approx(7.381071e-05, rel=1e-6)
    assert kl_code.item() == pytest.approx(0.2 * kl_exact_dim.item(), rel=1e-12)
    sigma, h = 0.6, 0.2
    paper = (h / 2) * (sd * (1 - sigma) / (2 * sigma) + 1 / sd) ** 2 * (t64(V_NEW_DELTA) ** 2).sum()
    assert (dmu**2).sum() / (2 * s**2) == pytest.approx(paper.item(), rel=1e-12)
    assert paper.item() == pytest.approx(2.952429e-04, rel=1e-6)


def test_sde_first_step_e2_uses_second_sigma():
    _x, _v, z, mean, s, sd = _step64(1.0, 0.9, 0.7, "sde", sigma_one=0.9)
    assert sd.item() == pytest.approx(2.2135943621178655, abs=1e-14)
    assert s.item() == pytest.approx(0.7, abs=1e-14)  # T2
    np.testing.assert_allclose(mean[0], [0.705, -0.4775, 0.28875, 1.51], atol=1e-14)
    x_next = mean + s * z
    np.testing.assert_allclose(x_next[0], [1.055, -1.1775, 1.33875, 1.51], atol=1e-14)
    assert gaussian_log_prob(x_next, mean, s).item() == pytest.approx(-0.99976358926594, abs=1e-13)


def test_cps_step_e3_exact_and_legacy():
    x, v, z, mean, s, sd = _step64(0.6, 0.4, 0.7, "cps")
    assert s.item() == pytest.approx(0.35640260967534715, abs=1e-15)
    assert sd.item() == s.item()
    np.testing.assert_allclose(mean[0], [0.6379154, -0.6781596, 0.4827606, 1.5631924], atol=5e-8)
    x_next = mean + s * z
    np.testing.assert_allclose(x_next[0], [0.8161167, -1.0345622, 1.0173645, 1.5631924], atol=5e-8)
    exact = gaussian_log_prob(x_next, mean, s)
    legacy = gaussian_log_prob(x_next, mean, s, legacy=True)
    assert exact.item() == pytest.approx(-0.32474427211378215, abs=1e-14)
    assert legacy.item() == pytest.approx(-0.11114496766047309, abs=1e-14)
    mean_new, _, _ = sde_transition(x, v + t64([V_NEW_DELTA]), t64(0.6), t64(0.4), t64(0.9), 0.7, "cps")
    np.testing.assert_allclose(mean_new[0], [0.6350418, -0.6724124, 0.4827606, 1.5545716], atol=5e-8)
    d_exact = (gaussian_log_prob(x_next, mean_new, s) - exact).item()
    d_legacy = (gaussian_log_prob(x_next, mean_new, s, legacy=True) - legacy).item()
    assert d_exact == pytest.approx(-0.005153037733767796, abs=1e-14)
    assert d_legacy == pytest.approx(-0.001309106770909313, abs=1e-14)
    assert d_legacy / d_exact == pytest.approx(2 * s.item() ** 2, rel=1e-10)  # T8
    assert d_legacy / d_exact == pytest.approx(0.2540456, abs=5e-8)
    assert ((mean_new - mean) ** 2).mean().item() / (2 * s.item() ** 2) == pytest.approx(1.1376627e-04, rel=1e-6)
    for legacy_mode, expect in (
        (False, [-0.10078543, 0.20157086, -0.30235629, 0]),
        (True, [-0.0256041, 0.0512082, -0.0768123, 0]),
    ):
        v_req = v.clone().requires_grad_(True)
        mean_g, _, _ = sde_transition(x, v_req, t64(0.6), t64(0.4), t64(0.9), 0.7, "cps")
        gaussian_log_prob(x_next, mean_g, s, legacy=legacy_mode).sum().backward()
        np.testing.assert_allclose(v_req.grad[0], expect, atol=5e-8)


def test_step_fp32_matches_e1_through_the_scheduler():
    sched = _scheduler_with_sigmas([1.0, 0.6, 0.4, 0.2])
    x, v, z = (torch.tensor([c]) for c in (X, V, Z))
    mean_only = sched.step(v, sched.timesteps[1], x, noise_level=0.7, step_index=1, return_logprobs=False)
    x_next = mean_only.prev_sample_mean + mean_only.std[:, None] * z
    out = sched.step(v.to(torch.bfloat16), sched.timesteps[1], x, noise_level=0.7, step_index=1, prev_sample=x_next)
    assert out.log_prob.dtype == torch.float32 and out.prev_sample_mean.dtype == torch.float32
    # v cast to bf16 is exact for these values; σ in fp32 => agreement to ~1e-6
    assert out.log_prob.item() == pytest.approx(-0.39777718710297194, abs=2e-6)
    assert out.std_dev_t.item() == pytest.approx(0.8573214099741122, abs=1e-6)


# ---- properties ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_noise_zero_is_euler_step_t1(kind):
    _x, _v, _z, mean, s, _sd = _step64(0.6, 0.4, 0.0, kind)
    np.testing.assert_array_equal(mean, t64([X]) + (t64(0.4) - t64(0.6)) * t64([V]))
    assert s.item() == 0.0


def test_sde_step0_coefficients_t2():
    for a in (0.3, 0.7, 1.2):
        x = t64([[1.0, 0.0]])
        v = t64([[0.0, 1.0]])
        mean, s, _ = sde_transition(x, v, t64(1.0), t64(0.8), t64(0.8), a, "sde")
        assert s.item() == pytest.approx(a, abs=1e-14)
        assert mean[0, 0].item() == pytest.approx(1 - a**2 / 2, abs=1e-14)  # c_x
        assert mean[0, 1].item() == pytest.approx(-0.2, abs=1e-14)  # c_v = Δ


def test_cps_coefficients_and_last_step_t3():
    sigma, sigma_next, a = 0.6, 0.4, 0.7
    s = sigma_next * math.sin(a * math.pi / 2)
    r = math.sqrt(sigma_next**2 - s**2)
    mean, s_out, _ = sde_transition(
        t64([[1.0, 0.0]]), t64([[0.0, 1.0]]), t64(sigma), t64(sigma_next), t64(0.9), a, "cps"
    )
    assert s_out.item() == pytest.approx(s, abs=1e-15)
    assert mean[0, 0].item() == pytest.approx((1 - sigma_next) + r, abs=1e-14)
    assert mean[0, 1].item() == pytest.approx(-sigma * (1 - sigma_next) + (1 - sigma) * r, abs=1e-14)
    assert s**2 + r**2 == pytest.approx(sigma_next**2, abs=1e-15)
    x, v = t64([X]), t64([V])
    mean_last, s_last, _ = sde_transition(x, v, t64(0.3), t64(0.0), t64(0.9), 0.8, "cps")
    assert s_last.item() == 0.0
    np.testing.assert_allclose(mean_last, x - 0.3 * v, atol=1e-15)


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_sampled_logprob_depends_only_on_z_t4(kind):
    gen = torch.Generator().manual_seed(3)
    x, v, z = (torch.randn(2, 64, generator=gen, dtype=F64) for _ in range(3))
    mean, s, _ = sde_transition(x, v, t64(0.7), t64(0.5), t64(0.9), 0.6, kind)
    lp = gaussian_log_prob(mean + s * z, mean, s)
    expected = -(z**2).mean(dim=1) / 2 - torch.log(s) - 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(lp, expected, atol=1e-13)


def test_scheduler_draw_then_score_roundtrip():
    sched = FlowMatchSDEDiscreteScheduler(shift=3.0)
    sched.set_timesteps(10)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 4, 8, 8, generator=gen)
    v = torch.randn(3, 4, 8, 8, generator=gen)
    drawn = sched.step(v, sched.timesteps[2], x, noise_level=0.7, step_index=2, generator=gen)
    scored = sched.step(v, sched.timesteps[2], x, noise_level=0.7, step_index=2, prev_sample=drawn.prev_sample)
    torch.testing.assert_close(scored.log_prob, drawn.log_prob, rtol=0, atol=0)
    per_row = sched.step(
        v, sched.timesteps[2], x, noise_level=0.7, step_index=torch.tensor([2, 2, 2]), prev_sample=drawn.prev_sample
    )
    torch.testing.assert_close(per_row.log_prob, drawn.log_prob, rtol=0, atol=1e-7)


@pytest.mark.parametrize("kind", ["sde", "cps"])
def test_bf16_draw_then_score_gives_the_same_log_prob(kind):
    """The log-prob of a drawn bf16 sample is that of the returned (rounded) sample, so re-scoring it agrees."""
    sched = FlowMatchSDEDiscreteScheduler(shift=3.0)
    sched.set_timesteps(10)
    gen = torch.Generator().manual_seed(0)
    x, v = (torch.randn(2, 16, 8, 8, generator=gen).to(torch.bfloat16) for _ in range(2))
    kw = {"noise_level": 0.7, "sde_type": kind, "step_index": 3}
    drawn = sched.step(v, sched.timesteps[3], x, generator=gen, **kw)
    assert drawn.prev_sample.dtype == torch.bfloat16
    scored = sched.step(v, sched.timesteps[3], x, prev_sample=drawn.prev_sample, **kw)
    torch.testing.assert_close(scored.log_prob, drawn.log_prob, rtol=0, atol=0)


def test_parity_with_parent_step_at_noise_zero():
    parent = FlowMatchEulerDiscreteScheduler(shift=3.0)
    ours = FlowMatchSDEDiscreteScheduler.from_config(parent.config)
    for sched in (parent, ours):
        sched.set_timesteps(6)
        sched.set_begin_index(0)
    gen = torch.Generator().manual_seed(1)
    x_p = x_o = torch.randn(2, 4, 8, 8, generator=gen)
    for t in parent.timesteps:
        v = torch.randn(2, 4, 8, 8, generator=gen)
        x_p = parent.step(v, t, x_p).prev_sample
        out = ours.step(v, t, x_o, noise_level=0.0)
        assert out.log_prob is None
        x_o = out.prev_sample
    torch.testing.assert_close(x_o, x_p, rtol=0, atol=0)


def test_config_roundtrip(tmp_path):
    sched = FlowMatchSDEDiscreteScheduler(
        shift=3.0, noise_level=0.8, sde_type="cps", cps_logprob="legacy", sde_window_size=3, sde_window_range=(0, 5)
    )
    sched.save_config(tmp_path)
    loaded = FlowMatchSDEDiscreteScheduler.from_pretrained(tmp_path)
    assert loaded.config.noise_level == 0.8 and loaded.config.sde_type == "cps"
    assert loaded.config.cps_logprob == "legacy" and loaded.config.sde_window_size == 3
    assert tuple(loaded.config.sde_window_range) == (0, 5)
    assert loaded.config.shift == 3.0


def test_config_defaults_used_by_step():
    sched = _scheduler_with_sigmas([1.0, 0.6, 0.4, 0.2], sde_type="cps", noise_level=0.7, cps_logprob="legacy")
    x, v, z = (torch.tensor([c], dtype=F64) for c in (X, V, Z))
    s = 0.4 * math.sin(0.35 * math.pi)
    mean, _, _ = sde_transition(x, v, t64(0.6), t64(0.4), t64(0.6), 0.7, "cps")
    out = sched.step(v, sched.timesteps[1], x, step_index=1, prev_sample=mean + s * z)
    assert out.log_prob.item() == pytest.approx(-0.11114496766047309, abs=1e-6)


# ---- schedules (E4, T12) -----------------------------------------------------------------------


def test_sd3_schedule_e4():
    sched = FlowMatchSDEDiscreteScheduler(shift=3.0)
    sched.set_timesteps(10)
    expected = [1.0, 0.960129, 0.913349, 0.857692, 0.790368, 0.707278, 0.602151, 0.464876, 0.278049, 0.008929, 0]
    np.testing.assert_allclose(sched.sigmas.numpy(), expected, atol=6e-7)
    ts = [1000, 960.12933, 913.349, 857.6923, 790.3683, 707.2785, 602.1506, 464.87604, 278.0488, 8.928572]
    np.testing.assert_allclose(sched.timesteps.numpy(), ts, rtol=1e-6)
    sched.set_timesteps(40)
    for i, val in ((1, 0.991331), (20, 0.741440), (38, 0.081046), (39, 0.008929)):
        assert sched.sigmas[i].item() == pytest.approx(val, abs=6e-7)


def test_sd3_per_step_stds_e4():
    sched = FlowMatchSDEDiscreteScheduler(shift=3.0)
    sched.set_timesteps(10)
    sig = sched.sigmas.double()
    want = [(3.505672, 0.700000, 0.913137), (3.435074, 0.742964, 0.868646), (2.272634, 0.536152, 0.815714),
            (1.718500, 0.445897, 0.751685), (1.359203, 0.391794, 0.672662), (1.088093, 0.352797, 0.572679),
            (0.861175, 0.319070, 0.442123), (0.652438, 0.282007, 0.264440), (0.434415, 0.225360, 0.008492),
            (0.066441, 0.006278, 0.0)]  # fmt: skip
    x = torch.zeros(1, 1, dtype=F64)
    for i, (sd_want, s_want, cps_want) in enumerate(want):
        _, s, sd = sde_transition(x, x, sig[i], sig[i + 1], sig[1], 0.7, "sde")
        _, s_cps, _ = sde_transition(x, x, sig[i], sig[i + 1], sig[1], 0.8, "cps")
        assert sd.item() == pytest.approx(sd_want, abs=2e-6)
        assert s.item() == pytest.approx(s_want, abs=2e-6)
        assert s_cps.item() == pytest.approx(cps_want, abs=2e-6)
        # legacy cps temperature 2s^2 (docs/omni/math.md §4): 1.668 at step 0, 1.4e-4 at step 8
        if i == 0:
            assert 2 * s_cps.item() ** 2 == pytest.approx(1.668, abs=1e-3)
        if i == 8:
            assert 2 * s_cps.item() ** 2 == pytest.approx(1.4e-4, abs=1e-5)


# ---- E8 / T13 Gaussian oracle ----------------------------------------------------------------------


def _oracle_variance(sigmas, kind, a, c2=0.25):
    var = 1.0
    sig = torch.as_tensor(sigmas, dtype=F64)
    one = t64([[1.0]])
    history = []
    for i in range(len(sigmas) - 1):
        s_i, s_n = sig[i], sig[i + 1]
        k = (s_i - (1 - s_i) * c2) / ((1 - s_i) ** 2 * c2 + s_i**2)
        mean, s, _ = sde_transition(one, k * one, s_i, s_n, sig[1], a, kind)
        var = mean.item() ** 2 * var + s.item() ** 2
        history.append(var)
    return history


def test_gaussian_oracle_e8_sd3_schedule():
    sched = FlowMatchSDEDiscreteScheduler(shift=3.0)
    sched.set_timesteps(10)
    sig = sched.sigmas.double().tolist()
    ode, sde, cps = (
        _oracle_variance(sig, "sde", 0.0),
        _oracle_variance(sig, "sde", 0.7),
        _oracle_variance(sig, "cps", 0.8),
    )
    assert ode[-1] == pytest.approx(0.128996, abs=2e-6)
    assert sde[-1] == pytest.approx(0.177256, abs=2e-6)
    assert cps[-1] == pytest.approx(0.094663, abs=2e-6)
    assert ode[0] == pytest.approx(0.921848, abs=2e-6)
    assert sde[0] == pytest.approx(1.001409, abs=2e-6)
    assert cps[0] == pytest.approx(0.921848, abs=2e-6)


@pytest.mark.parametrize(
    "n, ode_v, sde_v, cps_v", [(100, 0.24270, 0.25039, 0.15611), (1000, 0.24926, 0.25092, 0.16215)]
)
def test_gaussian_oracle_e8_uniform_t13(n, ode_v, sde_v, cps_v):
    sig = np.linspace(1.0, 0.0, n + 1).tolist()
    ode, sde, cps = (
        _oracle_variance(sig, "sde", 0.0)[-1],
        _oracle_variance(sig, "sde", 0.7)[-1],
        _oracle_variance(sig, "cps", 0.8)[-1],
    )
    assert (ode, sde, cps) == pytest.approx((ode_v, sde_v, cps_v), abs=6e-6)
    if n == 1000:
        assert abs(sde - 0.25) / 0.25 < 0.005 and abs(ode - 0.25) / 0.25 < 0.005
        assert abs(cps - 0.25) / 0.25 > 0.2  # cps is not a consistent SDE discretisation


def test_gaussian_oracle_monte_carlo_through_step():
    sched = FlowMatchSDEDiscreteScheduler(shift=3.0)
    sched.set_timesteps(10)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(200_000, 1, generator=gen, dtype=F64)
    c2 = 0.25
    for i in range(10):
        s_i = sched.sigmas[i].double()
        k = (s_i - (1 - s_i) * c2) / ((1 - s_i) ** 2 * c2 + s_i**2)
        x = sched.step(
            k * x, sched.timesteps[i], x, noise_level=0.7, step_index=i, generator=gen, return_logprobs=False
        ).prev_sample
    assert x.var().item() == pytest.approx(0.177256, rel=0.01)


# ---- windows (T11) ---------------------------------------------------------------------------------


def test_window_start_set_t11():
    gen = torch.Generator().manual_seed(0)
    starts = {draw_sde_window(10, 2, (0, 5), gen)[0] for _ in range(200)}
    assert starts == {0, 1, 2, 3}
    assert draw_sde_window(10, 0, None, gen) == (0, 9)
    starts = {draw_sde_window(10, 3, (0, 5), gen)[0] for _ in range(200)}
    assert starts == {0, 1, 2}


def test_window_with_one_possible_start_draws_nothing():
    gen, fresh = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert draw_sde_window(10, 2, (4, 6), gen) == (4, 6)
    assert draw_sde_window(10, 0, None, gen) == (0, 9)
    assert torch.equal(torch.rand(4, generator=gen), torch.rand(4, generator=fresh))  # gen did not advance
    draw_sde_window(10, 2, (4, 7), gen)  # two possible starts: a draw
    assert not torch.equal(torch.rand(4, generator=gen), torch.rand(4, generator=fresh))


def test_scheduler_window_uses_config():
    sched = FlowMatchSDEDiscreteScheduler(sde_window_size=2, sde_window_range=(1, 3))
    sched.set_timesteps(6)
    assert sched.sde_window(torch.Generator().manual_seed(0)) == (1, 3)


# ---- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"noise_level": -0.1}, "noise_level"),
        ({"noise_level": 1.2, "sde_type": "cps"}, "noise_level"),
        ({"sde_type": "ode"}, "sde_type"),
        ({"cps_logprob": "approx"}, "cps_logprob"),
        ({"step_index": 6}, "step_index"),
        ({"step_index": torch.tensor([0, 9])}, "step_index"),
    ],
)
def test_step_rejects_bad_input(kwargs, match):
    sched = FlowMatchSDEDiscreteScheduler()
    sched.set_timesteps(6)
    x = torch.zeros(2, 4)
    kwargs.setdefault("step_index", 0)
    with pytest.raises(ValueError, match=match):
        sched.step(x, sched.timesteps[0], x, **kwargs)


def test_step_rejects_shape_mismatch_and_int_timestep():
    sched = FlowMatchSDEDiscreteScheduler()
    sched.set_timesteps(6)
    with pytest.raises(ValueError, match="model_output"):
        sched.step(torch.zeros(2, 4), sched.timesteps[0], torch.zeros(2, 5), step_index=0)
    with pytest.raises(ValueError, match="prev_sample"):
        sched.step(
            torch.zeros(2, 4), sched.timesteps[0], torch.zeros(2, 4), step_index=0, prev_sample=torch.zeros(2, 3)
        )
    with pytest.raises(ValueError, match="timestep"):
        sched.step(torch.zeros(2, 4), 3, torch.zeros(2, 4), step_index=0)
    with pytest.raises(ValueError, match="step_index"):
        sched.step(torch.zeros(2, 4), sched.timesteps[0], torch.zeros(2, 4))


@pytest.mark.parametrize(
    "size, rng, match",
    [
        (2, (0, 11), "sde_window_range"),
        (2, (-1, 5), "sde_window_range"),
        (6, (0, 5), "sde_window_size"),
        (-1, None, "sde_window_size"),
        (0, (0, 5), "sde_window_range"),
    ],
)
def test_window_outside_schedule_rejected(size, rng, match):
    with pytest.raises(ValueError, match=match):
        draw_sde_window(10, size, rng, None)


def test_constructor_rejects_bad_config():
    with pytest.raises(ValueError, match="noise_level"):
        FlowMatchSDEDiscreteScheduler(noise_level=-1.0)
    with pytest.raises(ValueError, match="noise_level"):
        FlowMatchSDEDiscreteScheduler(sde_type="cps", noise_level=1.5)
