"""DiffusionNFT through the trainer on a local Ray (CPU, fp32, tiny Qwen-Image): the quickstart with only
`actor_rollout_ref.model.algorithm=diffusion_nft` learns, its first update is on-policy (θ_old = θ), a run resumes
bit for bit (the old policy is checkpointed), and the trainer skips what the loss does not read."""

from __future__ import annotations

import pytest

from verl_omni.trainer.report import learning_margin, read_metrics

from .test_trainer_direction import _quickstart

pytestmark = [pytest.mark.ray, pytest.mark.slow]

NFT = "actor_rollout_ref.model.algorithm=diffusion_nft"


def test_one_fast_step_skips_the_old_log_prob_and_reference_passes(trainer_run, tmp_path):
    """One FAST step: the rollout returns no log-probs, no old-log-prob or reference pass runs, the update is on-policy
    (v_θ = v_old bit for bit, hence L⁺ = L⁻), and the old policy is refreshed to θ after it."""
    run = trainer_run(tmp_path, [NFT, "trainer.total_training_steps=1", "trainer.val_before_train=false"])
    assert run.error is None, run.error
    (row,) = run.history
    assert "timing_s/old_log_prob" not in row and "timing_s/ref" not in row
    assert row["actor/nft_velocity_gap_max"] == 0.0 and row["actor/nft_loss_pos"] == row["actor/nft_loss_neg"]
    assert row["actor/grad_norm"] > 0 and row["actor/old_policy_decay"] == 0.0
    assert row["actor/old_policy_gap_before"] > 0  # the update moved θ away from θ_old; the refresh copies it
    assert row["perf/flops/update_actor"] > 0  # counted (`StageFlops`, trains_on="clean"); on the CPU no MFU


def test_diffusion_nft_quickstart_raises_the_reward_by_more_than_3_standard_errors(
    ray_session, tiny_qwen_image_path, tmp_path
):
    """12 seeded quickstart steps through `verl-omni-train` with only `model.algorithm=diffusion_nft` (which makes
    the loss_mode and adv_estimator follow; upstream defaults mix_beta 0.5, copy old policy, all timesteps): the mean
    reward of the last 3 steps minus the first 3 (`report.learning_margin`) exceeds +3 standard errors. On main it is
    +46.6 (deterministic: fp32 on the CPU, fixed seeds; FlowGRPO's is +44.4 on the same run); about 100 s.

    Mutation run by hand: the advantages negated before p is formed (`apply_adv_mode(-batch["advantages"], ...)` in
    `FlowGRPOTrainer._prepare_clean_batch`): FAILED, margin -72.6.
    """
    from verl_omni.trainer.main import run

    argv = _quickstart(
        tiny_qwen_image_path,
        tmp_path,
        NFT,
        "trainer.total_training_steps=12",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    )
    assert run(argv) == 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 13))
    first = rows[0]
    # the on-policy identity of the first update: θ = θ_old, so v_θ = v_old and L⁺ = L⁻ exactly
    assert first["actor/nft_velocity_gap_max"] == 0.0
    assert first["actor/nft_loss_pos"] == first["actor/nft_loss_neg"]
    margin = learning_margin(rows)
    assert margin is not None and margin["margin"] > 3.0, margin


def test_resume_is_bit_identical_with_an_ema_old_policy_and_a_timestep_subset(
    ray_session, straight_vs_resumed, tmp_path
):
    """3 FAST steps straight == 2 steps, stop, resume, 1 step: metrics, parameters and AdamW state bit-identical. The
    old policy is an EMA (decay 0.5, so θ_old ≠ θ after a refresh and must come from the checkpoint) and half of the
    timesteps are trained (the subset and the noise are drawn from the step, so a resume draws the same).

    Mutation run by hand: the old policy not loaded on resume (`load_checkpoint` skips `self.old_policy.load`):
    FAILED."""
    common = [
        NFT,
        "algorithm.old_policy_decay=0.5",
        "algorithm.timestep_fraction=0.5",
        "trainer.val_before_train=false",
    ]
    straight = straight_vs_resumed(tmp_path, common).straight
    assert [row["actor/old_policy_decay"] for row in straight.history] == [0.5, 0.5, 0.5]
    assert straight.history[0]["actor/nft_velocity_gap_max"] == 0.0  # on-policy first update
    assert straight.history[2]["actor/nft_velocity_gap_max"] > 0  # the EMA lags behind θ
