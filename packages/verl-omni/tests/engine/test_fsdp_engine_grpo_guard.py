"""`DiffusersFSDPEngine` with `actor.diffusion_loss.loss_mode=grpo_guard` (one process, gloo, CPU, fp32, tiny
Qwen-Image).

Mutation run by hand: `compute_log_prob` without the old means (`keep_mean = False`): FAILED
`test_old_pass_keeps_the_means_and_recompute_equals_the_fused_update` (no `old_prev_sample_mean`; and the update
then fails with "batch lacks ['old_prev_sample_mean']").
"""

from __future__ import annotations

import pytest
import torch

from .conftest import sample_trajectory
from .test_fsdp_engine import _actor, _params, _with_update_keys

GUARD = {"loss_mode": "grpo_guard", "clip_ratio": 2e-6}


def test_old_pass_keeps_the_means_and_recompute_equals_the_fused_update(make_engine, qwen_trajectory):
    plain = make_engine(actor=_actor(mini=4, micro=2))
    assert "old_prev_sample_mean" not in plain.compute_log_prob(qwen_trajectory)  # flow_grpo: no extra memory

    recompute = make_engine(actor=_actor(mini=4, micro=2, diffusion_loss=GUARD))
    old = recompute.compute_log_prob(qwen_trajectory)
    b, k = qwen_trajectory["log_probs"].shape
    assert old["old_prev_sample_mean"].shape[:2] == (b, k) and old["old_prev_sample_mean"].ndim > 2
    batch = _with_update_keys(qwen_trajectory, old["old_log_probs"])
    with pytest.raises(ValueError, match=r"batch lacks \['old_prev_sample_mean'\]"):
        recompute.update_policy(batch)
    batch["old_prev_sample_mean"] = old["old_prev_sample_mean"]
    m_recompute = recompute.update_policy(batch)

    fused = make_engine(actor=_actor(mini=4, micro=2, diffusion_loss=GUARD))  # on-policy: one mini-batch, 1 epoch
    m_fused = fused.update_policy(_with_update_keys(qwen_trajectory, old["old_log_probs"]).exclude("old_log_probs"))

    # the first update's identity: ρ̃ = 1 (exactly when fused: Δμ = 0 and ℓ_θ = ℓ_old), nothing clipped at ε = 2e-6
    assert m_fused["actor/ratio_mean"] == 1.0 and m_fused["actor/ratio_norm_bias"] == 0.0
    assert m_fused["actor/pg_clipfrac"] == 0.0
    assert abs(m_recompute["actor/ratio_mean"] - 1.0) < 1e-6 and m_recompute["actor/pg_clipfrac"] == 0.0
    assert m_fused["actor/grad_norm"] > 0 and m_fused["actor/step_loss_scale"] > 1
    for name, value in _params(fused).items():
        torch.testing.assert_close(value, _params(recompute)[name], atol=1e-6, rtol=1e-5, msg=name)


def test_update_rejects_a_cps_trajectory_naming_both_keys(make_engine, tiny_qwen_image_pipe):
    cps = sample_trajectory(tiny_qwen_image_pipe, sde_type="cps", seed=5)
    engine = make_engine(actor=_actor(mini=4, micro=2, diffusion_loss=GUARD))
    with pytest.raises(ValueError, match=r"loss_mode='grpo_guard' holds only for rollout\.algo\.sde_type in \['sde'\], "
                                         r"but the batch was sampled with sde_type='cps'"):  # fmt: skip
        engine.update_policy(_with_update_keys(cps, cps["log_probs"]).exclude("old_log_probs"))
