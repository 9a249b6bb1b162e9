"""`reward.stream` through the trainer: the same rewards, advantages, metrics and weights as without it."""

from __future__ import annotations

import threading

import pytest

import verl_omni.trainer.flow_grpo_trainer as trainer_module

from .conftest import assert_state_equal

pytestmark = [pytest.mark.ray, pytest.mark.slow]

COMMON = [
    "trainer.total_training_steps=2",
    "trainer.val_before_train=false",
    "trainer.save_freq=-1",
    "actor_rollout_ref.rollout.agent.prompts_per_request=1",  # one request (one group) per prompt
]


class _FirstGroupLast:
    """The reward manager, but the group at row 0 is scored only once another group has been (streaming only).

    Scoring then completes out of batch order, so rewards joined in completion order would land on the wrong rows.
    """

    def __init__(self, inner) -> None:
        self.inner, self.other_scored = inner, threading.Event()

    def score(self, batch, *, step=None):
        if batch.offset == 0:
            assert self.other_scored.wait(120), "no other group was scored"
        out = self.inner.score(batch, step=step)
        if batch.offset != 0:
            self.other_scored.set()
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_streaming_gives_the_same_rewards_advantages_and_weights(ray_session, trainer_run, metric_diff, tmp_path):
    seen: dict[str, list] = {}

    def spy(rewards, prompt_index, **kwargs):
        out = compute(rewards, prompt_index, **kwargs)
        seen[mode].append((rewards.clone(), out.clone()))
        return out

    def slow_first(components):
        components.reward = _FirstGroupLast(components.reward)

    compute = trainer_module.compute_flow_grpo_advantages
    runs = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer_module, "compute_flow_grpo_advantages", spy)
        for mode, extra in (("off", {}), ("on", {"wrap": slow_first})):
            seen[mode] = []
            flag = f"reward.stream={str(mode == 'on').lower()}"
            runs[mode] = trainer_run(tmp_path / mode, [*COMMON, flag], fingerprint=True, **extra)
            assert runs[mode].error is None, runs[mode].error
    off, on = runs["off"], runs["on"]
    assert len(seen["off"]) == len(seen["on"]) == 2
    for (r_off, a_off), (r_on, a_on) in zip(seen["off"], seen["on"], strict=True):
        assert r_off.shape == (4,) and not (r_off == r_off[0]).all()  # two groups of n=2, not all one reward
        assert r_on.tolist() == r_off.tolist()
        assert a_on.tolist() == a_off.tolist()
    for row_off, row_on in zip(off.history, on.history, strict=True):
        assert metric_diff(row_off, row_on) == []
        assert row_off["timing_s/reward_exposed"] >= 0 and row_on["timing_s/reward_exposed"] >= 0
    assert_state_equal(off.fingerprint, on.fingerprint)
