"""`DiffusersFSDPEngine` with DanceGRPO's per-sample step subset (`train_step_mask`, from
`algorithm.timestep_fraction`): one process, gloo, CPU, fp32, tiny Qwen-Image, K = 2 stored steps."""

from __future__ import annotations

import torch

from .test_fsdp_engine import _actor, _grads, _with_update_keys

#: no grad clipping: the test compares raw gradients
NO_CLIP = {"grad_clip": 1e6, "optim": {"clip_grad": 1e6}}


def _scored_rows(engine) -> list[int]:
    """Wrap `engine._score` to record how many rows each step forward sees."""
    seen: list[int] = []
    inner = engine._score

    def score(micro, j):
        seen.append(micro.batch_size[0])
        return inner(micro, j)

    engine._score = score
    return seen


def test_a_step_subset_trains_only_its_steps_with_the_mean_over_trained_steps(make_engine, qwen_trajectory):
    """Each row trains one of its 2 steps (mask M). On-policy (ratio 1, nothing clipped) the loss is linear in the
    advantages, so the gradient must equal the all-steps update's with per-step advantages A_i·M_ij·K/k_t
    (= 2·A_i on the trained step, 0 on the other); and only the trained rows are forwarded (B·k_t, not B·K).

    Mutations run by hand: the weight `k_train` replaced by `k` in `update_policy` (the scale of the mean over
    trained steps): FAILED (gradients off by 2x); `_trained_rows` returning every row for every step: FAILED (rows
    forwarded 8, not 4)."""
    b, k = qwen_trajectory["log_probs"].shape
    mask = torch.tensor([[True, False], [False, True], [False, True], [True, False]])
    assert mask.shape == (b, k)
    batch = _with_update_keys(qwen_trajectory, qwen_trajectory["log_probs"], seed=3).exclude("old_log_probs")

    subset = make_engine(actor=_actor(mini=2, micro=4, **NO_CLIP))
    rows = _scored_rows(subset)
    masked = batch.clone()
    masked["train_step_mask"] = mask
    m_subset = subset.update_policy(masked)
    assert sum(rows) == b * 1  # k_t = 1 of K = 2 steps per row
    assert m_subset["actor/ratio_mean"] == 1.0 and m_subset["actor/pg_clipfrac"] == 0.0

    full = make_engine(actor=_actor(mini=2, micro=4, **NO_CLIP))
    weighted = batch.clone()
    weighted["advantages"] = batch["advantages"][:, None] * mask.float() * (k / 1)
    full.update_policy(weighted)
    g_subset, g_full = _grads(subset), _grads(full)
    assert g_subset.keys() == g_full.keys() and g_subset
    for name, grad in g_subset.items():
        torch.testing.assert_close(grad, g_full[name], atol=1e-7, rtol=1e-5, msg=name)
    assert any(bool(g.abs().sum() > 0) for g in g_subset.values())


def test_the_old_log_prob_pass_scores_only_the_trained_rows(make_engine, qwen_trajectory):
    engine = make_engine(actor=_actor(mini=2, micro=4))
    everything = engine.compute_log_prob(qwen_trajectory)["old_log_probs"]
    rows = _scored_rows(engine)
    masked = qwen_trajectory.clone()
    mask = torch.tensor([[True, False], [True, False], [False, True], [False, True]])
    masked["train_step_mask"] = mask
    subset = engine.compute_log_prob(masked)["old_log_probs"]
    assert rows == [2, 2]
    assert torch.equal(subset[mask], everything[mask]) and bool((subset[~mask] == 0).all())


def test_a_mask_with_unequal_step_counts_is_refused(make_engine, qwen_trajectory):
    import pytest

    batch = _with_update_keys(qwen_trajectory, qwen_trajectory["log_probs"]).exclude("old_log_probs")
    batch["train_step_mask"] = torch.tensor([[True, True], [False, True], [False, True], [True, False]])
    with pytest.raises(ValueError, match=r"train_step_mask: expected \(4, 2\) bool with the same number"):
        make_engine(actor=_actor(mini=2, micro=4)).update_policy(batch)
