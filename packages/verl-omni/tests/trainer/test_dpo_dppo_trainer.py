"""Online Diffusion-DPO and Flow-DPPO through the trainer on a local Ray (CPU, fp32, tiny Qwen-Image): the quickstart
with only `model.algorithm=dpo` / `loss_mode=flow_dppo` learns, the first update meets each loss's on-policy identity,
and a run resumes bit for bit."""

from __future__ import annotations

import math

import pytest

from verl_omni.trainer.report import learning_margin, read_metrics

from .test_trainer_direction import _quickstart

pytestmark = [pytest.mark.ray, pytest.mark.slow]

DPO = "actor_rollout_ref.model.algorithm=dpo"
DPPO = "actor_rollout_ref.actor.diffusion_loss.loss_mode=flow_dppo"


def _quickstart_rows(tiny_qwen_image_path, tmp_path, override: str, steps: int) -> list[dict]:
    from verl_omni.trainer.main import run

    argv = _quickstart(
        tiny_qwen_image_path,
        tmp_path,
        override,
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    )
    assert run(argv) == 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    return rows


def test_dpo_quickstart_raises_the_reward_by_more_than_3_standard_errors(ray_session, tiny_qwen_image_path, tmp_path):
    """24 seeded quickstart steps through `verl-omni-train` with only `model.algorithm=dpo` (loss_mode and advantage
    estimator follow; upstream's dpo_beta 2000; 4 pairs per step): the mean reward of the last 3 steps minus the
    first 3 (`report.learning_margin`) exceeds +3 standard errors. On main it is +5.6 (deterministic: fp32 on the
    CPU, fixed seeds; +3.2 after 12 steps, hence 24).

    The first update starts at policy = reference (zero-initialised LoRA B, adapters off for the reference): every
    Δ is 0 exactly, so z = 0, the loss is log 2 and the implicit reward margin is 0.

    Mutations run by hand (each edited into the code, this test run, then restored), and what this test saw:

    * chosen and rejected swapped in `select_preference_pairs` (`pairs += [int(ranked[-1]), int(ranked[0])]`):
      FAILED, margin -5.8 (the update prefers the worse image).
    """
    rows = _quickstart_rows(tiny_qwen_image_path, tmp_path, DPO, 24)
    first = rows[0]
    assert "timing_s/old_log_prob" not in first and "timing_s/ref" not in first  # no transition passes
    assert first["actor/dpo_reward_margin"] == 0.0 and first["actor/dpo_reward_margin_max"] == 0.0, first
    assert first["actor/pg_loss"] == pytest.approx(math.log(2), abs=1e-6) and first["actor/grad_norm"] > 0
    assert rows[1]["actor/dpo_reward_margin_max"] > 0  # from the second step on the policy differs from the reference
    margin = learning_margin(rows)
    assert margin is not None and margin["margin"] > 3.0, margin


def test_flow_dppo_quickstart_raises_the_reward_by_more_than_3_standard_errors(
    ray_session, tiny_qwen_image_path, tmp_path
):
    """12 seeded quickstart steps with only `loss_mode=flow_dppo` (fused on-policy update: one mini-batch per step):
    ρ = 1 and D = 0 exactly, nothing is masked, and the reward rises by more than +3 standard errors. On main it is
    +44.4 (deterministic; FlowGRPO's is +44.4 too: on-policy, neither clip nor mask acts, so the gradients agree).

    Mutations run by hand: the surrogate's sign flipped (`-adv * ratio` → `adv * ratio` in `flow_dppo_policy_loss`):
    FAILED, margin -36.2.
    """
    rows = _quickstart_rows(tiny_qwen_image_path, tmp_path, DPPO, 12)
    first = rows[0]
    assert first["actor/ratio_mean"] == 1.0 and first["actor/kl_new_old_max"] == 0.0, first
    assert first["actor/masked_fraction"] == 0.0
    margin = learning_margin(rows)
    assert margin is not None and margin["margin"] > 3.0, margin


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param([DPO], id="dpo"),
        pytest.param([DPPO, "actor_rollout_ref.actor.ppo_mini_batch_size=1"], id="flow_dppo-two-minibatches"),
    ],
)
def test_three_steps_straight_equal_two_then_a_resumed_one_bit_for_bit(
    ray_session, straight_vs_resumed, tmp_path, overrides
):
    """FAST config (2 prompts x 2 images): 3 steps straight == 2 steps, stop, resume, 1 step — metrics, LoRA weights and
    AdamW state bit-identical (DPO: the pair noise and noise level are drawn from the run seed and the step; Flow-DPPO
    with 2 mini-batches: the second is off-policy, so the KL mask is live).

    Mutation run by hand: the pair noise drawn from the global RNG instead of the step's seeded generator
    (`torch.randn(...)` without `generator=gen` in `FlowGRPOTrainer._prepare_pair_batch`): FAILED [dpo], the 2-step
    run's metrics differ from the straight run's (`actor/dpo_model_error_chosen`, ... `actor/grad_norm`)."""
    common = [*overrides, "trainer.val_before_train=false"]
    straight = straight_vs_resumed(tmp_path, common).straight
    first = straight.history[0]
    if overrides[0] == DPO:
        assert first["actor/dpo_reward_margin"] == 0.0 and first["actor/pg_loss"] == pytest.approx(math.log(2))
        # the pair update's FLOPs are counted (`StageFlops`, trains_on="pairs": the chosen/rejected rows only)
        assert first["perf/flops/update_actor"] > 0 and first["perf/flops/step"] > first["perf/flops/gen"]
    else:  # the old-log-prob pass ran; the second mini-batch sees the first one's update
        assert first["timing_s/old_log_prob"] > 0 and first["actor/kl_new_old_max"] > 0
