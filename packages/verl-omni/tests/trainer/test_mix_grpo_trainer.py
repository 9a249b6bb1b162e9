"""MixGRPO through `verl-omni-train` on a local Ray (CPU, tiny Qwen-Image): the quickstart with only sampler overrides
(a window sliding over training steps, ODE outside it) learns, its first update is on-policy, and a resumed run
continues the window schedule bit for bit."""

from __future__ import annotations

import pytest

from verl_omni.trainer.checkpoint import CheckpointManager
from verl_omni.trainer.report import learning_margin, read_metrics

from .test_trainer_direction import _quickstart

pytestmark = [pytest.mark.ray, pytest.mark.slow]

#: MixGRPO on the quickstart's 4-step sampler: 2 SDE (trained) steps, the window at start 0 for steps 1-3, then 1
MIX = [
    "actor_rollout_ref.rollout.algo.sample_strategy=progressive",
    "actor_rollout_ref.rollout.algo.sde_window_size=2",
    "actor_rollout_ref.rollout.algo.sde_window_range=[0,3]",
    "actor_rollout_ref.rollout.algo.iters_per_group=4",
]


@pytest.mark.parametrize("flash", [[], ["actor_rollout_ref.rollout.algo.dpm_algorithm_type=dpmsolver++"]],
                         ids=["euler", "flash"])  # fmt: skip
def test_mix_grpo_quickstart_raises_the_reward_by_more_than_3_standard_errors(
    ray_session, tiny_qwen_image_path, tmp_path, flash
):
    """12 seeded quickstart steps with only the `MIX` sampler overrides (and, for MixGRPO-Flash, DPM-Solver++ after
    the window): every step's window is where the schedule puts it, the first update in fp32 has ratio 1 (nothing
    clipped), and the mean reward of the last 3 steps minus the first 3 (`report.learning_margin`) exceeds +3
    standard errors. On main it is +16.7 with Euler and +21.1 with Flash (deterministic: fp32 on the CPU, fixed seeds;
    FlowGRPO's is +44.4 with every step trained); 1-2 minutes each on a busy 2-core machine.

    Mutation run by hand (edited into the code, this test run, then restored), and what this test saw:

    * `FlowGRPOTrainer._step_sampling` passing `strategy="random"` whatever `sample_strategy` says: FAILED, the
      window starts were not [0, 0, 0, 1, ...].
    """
    from verl_omni.trainer.main import run

    argv = _quickstart(
        tiny_qwen_image_path,
        tmp_path,
        *MIX,
        *flash,
        "trainer.total_training_steps=12",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    )
    assert run(argv) == 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert [r["rollout/sde_window_start"] for r in rows] == [0.0] * 3 + [1.0] * 9
    first = rows[0]
    assert abs(first["actor/ratio_mean"] - 1) < 1e-6 and first["actor/pg_clipfrac"] == 0.0, first
    margin = learning_margin(rows)
    assert margin is not None and margin["margin"] > 3.0, margin


def test_mix_grpo_resume_continues_the_window_schedule_bit_for_bit(ray_session, straight_vs_resumed, tmp_path):
    """3 steps straight == 2 steps, checkpoint, resume, 1 step, under a progressive window (starts 0, 1, 1): the
    checkpoint records the window position, the resumed step's window, metrics, weights and AdamW state are
    bit-identical (a checkpoint whose recorded position the schedule does not reproduce is refused: see
    tests/trainer/test_window_resume.py).

    Mutation run by hand: `FlowGRPOTrainer.save_checkpoint` recording `"sde_window_start": None`: FAILED,
    `assert None == 1`.
    """
    window = [
        "actor_rollout_ref.rollout.algo.sample_strategy=progressive",
        "actor_rollout_ref.rollout.algo.iters_per_group=2",  # FAST: K=1 in [0, 2]: starts 0, 1, 1
    ]

    def checkpoint_records_the_window(first_two):
        state = CheckpointManager.load_trainer_state(first_two.ckpt_dir / "global_step_2")
        assert state["sde_window_start"] == 1  # the window position of the checkpoint's step

    runs = straight_vs_resumed(tmp_path, window, before_resume=checkpoint_records_the_window)
    assert [r["rollout/sde_window_start"] for r in runs.straight.history] == [0.0, 1.0, 1.0]
