"""DanceGRPO through `verl-omni-train` on a local Ray (CPU, tiny Qwen-Image): the quickstart with only the sampler's
shared initial noise and `algorithm.timestep_fraction` learns, its first update is on-policy, and a resumed run draws
the same noise and step subsets bit for bit."""

from __future__ import annotations

import pytest

from verl_omni.trainer.report import learning_margin, read_metrics

from .test_trainer_direction import _quickstart

pytestmark = [pytest.mark.ray, pytest.mark.slow]

#: DanceGRPO on the quickstart's 4-step sampler (3 SDE steps): one x_T per prompt, 2 of the 3 steps trained per image
DANCE = ["actor_rollout_ref.rollout.algo.init_same_noise=true", "algorithm.timestep_fraction=0.7"]


@pytest.mark.parametrize("sde_type", ["sde", "dance_sde"])
def test_dance_grpo_quickstart_raises_the_reward_by_more_than_3_standard_errors(
    ray_session, tiny_qwen_image_path, tmp_path, sde_type
):
    """12 seeded quickstart steps with only the `DANCE` overrides (and the sampler: FlowGRPO's `sde`, or upstream
    DanceGRPO's `dance_sde`): the first update in fp32 has ratio 1 (nothing clipped), and the mean reward of the last 3
    steps minus the first 3 (`report.learning_margin`) exceeds +3 standard errors. On main it is +30.9 with `sde` and
    +12.6 with `dance_sde` (deterministic: fp32 on the CPU, fixed seeds; FlowGRPO's is +44.4 with every step trained
    and one noise per image); 1-2 minutes each on a busy 2-core machine.

    Mutation run by hand (edited into the code, this test run, then restored), and what this test saw:

    * the trained rows of a step given the advantages of the micro-batch's first rows (`adv =
      micro["advantages"][: part.batch_size[0]]` in `DiffusersFSDPEngine.update_policy`): FAILED, margin -0.6.
    """
    from verl_omni.trainer.main import run

    argv = _quickstart(
        tiny_qwen_image_path,
        tmp_path,
        *DANCE,
        f"actor_rollout_ref.rollout.algo.sde_type={sde_type}",
        "trainer.total_training_steps=12",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    )
    assert run(argv) == 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 13))
    first = rows[0]
    assert abs(first["actor/ratio_mean"] - 1) < 1e-6 and first["actor/pg_clipfrac"] == 0.0, first
    margin = learning_margin(rows)
    assert margin is not None and margin["margin"] > 3.0, margin


def test_dance_grpo_resume_draws_the_same_noise_and_step_subsets(ray_session, straight_vs_resumed, tmp_path):
    """3 steps straight == 2 steps, checkpoint, resume, 1 step, with shared initial noise and a step subset (FAST:
    K = 2, τ = 0.5 → 1 step per image): the resumed step's rewards, metrics, weights and AdamW state are
    bit-identical (the rewards too: the same images, so the same noise). The shared noise itself is checked in
    tests/pipelines/test_shared_noise.py, the subset's update in tests/engine/test_fsdp_engine_step_subset.py.

    Mutation run by hand: the subset's seed drawn from the OS (`random.Random().getrandbits(63)` in
    `FlowGRPOTrainer._train_step_mask`): FAILED, the resumed step's `actor/*` metrics differ from the straight run's.
    """
    dance = ["actor_rollout_ref.rollout.algo.init_same_noise=true", "algorithm.timestep_fraction=0.5",
             "actor_rollout_ref.rollout.algo.sde_window_size=2"]  # fmt: skip
    straight_vs_resumed(tmp_path, dance)
