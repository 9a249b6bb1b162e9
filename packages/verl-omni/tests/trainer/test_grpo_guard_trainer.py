"""GRPO-Guard through `verl-omni-train` on a local Ray (CPU, tiny Qwen-Image): the quickstart with only
`actor.diffusion_loss.loss_mode=grpo_guard` learns, its first update is on-policy, and a run resumes bit for bit."""

from __future__ import annotations

import pytest

from verl_omni.trainer.report import learning_margin, read_metrics

from .test_trainer_direction import _quickstart

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_grpo_guard_quickstart_raises_the_reward_by_more_than_3_standard_errors(
    ray_session, tiny_qwen_image_path, tmp_path
):
    """12 seeded quickstart steps with only the loss_mode override (fused on-policy old log-probs and means): the
    first update sees ρ̃ = 1 exactly (Δμ = 0, b = 0, no clipping), and the mean reward of the last 3 steps minus
    the first 3 (`report.learning_margin`) exceeds +3 standard errors. On main it is +23.1
    (deterministic: fp32 on the CPU, fixed seeds; FlowGRPO's is +44.4 on the same run); about 40 s with Ray start.

    Mutations run by hand (each edited into the code, this test run, then restored), and what this test saw:

    * the normalised log-ratio negated (`return -scale * (log_ratio + bias), ...` in
      `verl_omni.algos.grpo_guard.grpo_guard_ratio_norm`): FAILED, margin -71.9 (the on-policy gradient flips).
    """
    from verl_omni.trainer.main import run

    argv = _quickstart(
        tiny_qwen_image_path,
        tmp_path,
        "actor_rollout_ref.actor.diffusion_loss.loss_mode=grpo_guard",
        "trainer.total_training_steps=12",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    )
    assert run(argv) == 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 13))
    first = rows[0]
    # the on-policy identity of the first update: ρ̃ = exp(s̄·(0 + 0)) = 1, nothing clipped
    assert first["actor/ratio_mean"] == 1.0 and first["actor/ratio_norm_bias"] == 0.0, first
    assert first["actor/pg_clipfrac"] == 0.0
    # the guard ran (its statistics are reported): s̄ > 0 and the ÷|dt| factor > 1 on the 4-step schedule
    assert first["actor/ratio_norm_scale"] > 0 and first["actor/step_loss_scale"] > 1
    margin = learning_margin(rows)
    assert margin is not None and margin["margin"] > 3.0, margin


def test_grpo_guard_with_the_old_log_prob_pass_gets_the_old_means_and_resumes_bit_for_bit(
    ray_session, straight_vs_resumed, tmp_path
):
    """With the fused on-policy update turned off, the trainer's old-log-prob pass returns the old transition means
    too (the loss needs them): the first update is on-policy up to fp32 kernel numerics. FAST config: 3 steps
    straight == 2 steps, stop, resume, 1 step (metrics, LoRA weights and AdamW state bit-identical).

    Mutations run by hand: the trainer keeps only `old_log_probs` from the pass (`batch["old_log_probs"] = ...
    ["old_log_probs"]`): FAILED, "update_policy: batch lacks ['old_prev_sample_mean']". The AdamW state not restored
    (`if False and "optimizer" in contents` in `engine/checkpoint.load_engine_checkpoint`): FAILED, the resumed LoRA
    weights differ (`time_text_embed...lora_A`)."""
    common = [
        "actor_rollout_ref.actor.diffusion_loss.loss_mode=grpo_guard",
        "algorithm.rollout_correction.fuse_on_policy_old_log_prob=false",
        "trainer.val_before_train=false",
    ]
    straight = straight_vs_resumed(tmp_path, common).straight
    row = straight.history[0]
    assert row["timing_s/old_log_prob"] > 0  # the separate pass ran
    assert abs(row["actor/ratio_mean"] - 1) < 1e-6 and row["actor/ratio_norm_bias"] < 1e-10
    assert row["actor/pg_clipfrac"] == 0.0 and row["actor/grad_norm"] > 0
