"""Step 6 fused into an on-policy update: the trainer skips the old-log-prob recompute only when the engine may take
the old log-probs from the update's own forwards, and the result equals the recompute's (fp32, tiny Qwen-Image)."""

from __future__ import annotations

import itertools
import types

import pytest
import torch

from verl_core.config import ConfigValueError
from verl_omni.engine import DiffusersFSDPEngine
from verl_omni.trainer.config import DiffusionTrainerConfig, load_config


@pytest.fixture(scope="module")
def quickstart() -> DiffusionTrainerConfig:
    return load_config(config_name="quickstart")


def _variant(base: DiffusionTrainerConfig, *, world: int, prompts: int, mini: int, epochs: int, n: int = 2):
    arr = base.actor_rollout_ref
    # rollout.n is the group size's one home: actor/ref.rollout_n unset (None) are filled from it again
    actor = arr.actor.evolve(rollout_n=None, ppo_mini_batch_size=mini, ppo_epochs=epochs)
    ref = arr.ref.evolve(rollout_n=None)
    return base.evolve(
        actor_rollout_ref=arr.evolve(actor=actor, ref=ref, rollout=arr.rollout.evolve(n=n)),
        data=base.data.evolve(train_batch_size=prompts),
        trainer=base.trainer.evolve(n_gpus_per_node=world),
    )


def _engine_accepts_no_old_log_probs(config: DiffusionTrainerConfig) -> bool:
    """Ask the engine's own check (on a stand-in holding only what it reads) whether the update is on-policy."""
    world = config.trainer.world_size
    local = config.data.train_batch_size * config.actor_rollout_ref.rollout.n // world
    actor = config.actor_rollout_ref.actor
    stand_in = types.SimpleNamespace(config=actor, world_size=world, _group_size=actor.rollout_n)
    try:
        DiffusersFSDPEngine._check_on_policy(stand_in, local)
    except ValueError:
        return False
    return True


def test_on_policy_update_is_the_engines_rule(quickstart):
    checked = {True: 0, False: 0}
    for world, prompts, mini, epochs, n in itertools.product((1, 2, 4), (2, 4), (1, 2, 4, 8), (1, 2), (1, 2)):
        try:
            config = _variant(quickstart, world=world, prompts=prompts, mini=mini, epochs=epochs, n=n)
        except ConfigValueError:
            continue  # the batch does not split over the ranks: rejected before any trainer exists
        expected = _engine_accepts_no_old_log_probs(config)
        assert config.on_policy_update is expected, (world, prompts, mini, epochs, n)
        checked[expected] += 1
    assert checked[True] > 5 and checked[False] > 5


@pytest.mark.parametrize(
    ("mini", "epochs", "bypass", "fuse", "fused"),
    [
        pytest.param(4, 1, False, True, True, id="on-policy"),
        pytest.param(8, 1, False, True, True, id="mini-batch larger than the batch"),
        pytest.param(4, 1, False, False, False, id="switched off"),
        pytest.param(4, 1, True, True, False, id="bypass mode"),
        pytest.param(2, 1, False, True, False, id="two mini-batches"),
        pytest.param(4, 2, False, True, False, id="two epochs"),
    ],
)
def test_the_trainer_fuses_only_an_on_policy_update_without_bypass(quickstart, mini, epochs, bypass, fuse, fused):
    from verl_omni.trainer.flow_grpo_trainer import FlowGRPOTrainer

    config = _variant(quickstart, world=1, prompts=4, mini=mini, epochs=epochs)
    correction = config.algorithm.rollout_correction.evolve(bypass_mode=bypass, fuse_on_policy_old_log_prob=fuse)
    config = config.evolve(algorithm=config.algorithm.evolve(rollout_correction=correction))
    assert config.fuse_old_log_prob is fused
    assert FlowGRPOTrainer(config).fuse_old_log_prob is fused


class _ActorSpy:
    """Wraps the `ActorGroup`: records each split call (method) and whether its batch carried `old_log_probs`."""

    def __init__(self, components) -> None:
        self.inner, self.calls = components.actor, []
        components.actor = self

    def _spy(self, method, batch):
        self.calls.append((method, "old_log_probs" in batch))
        return getattr(self.inner, method)(batch)

    def compute_log_prob(self, batch):
        return self._spy("compute_log_prob", batch)

    def compute_ref(self, batch):
        return self._spy("compute_ref", batch)

    def update_policy(self, batch):
        return self._spy("update_policy", batch)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _run(trainer_run, folder, overrides):
    spies = []
    run = trainer_run(
        folder,
        ["trainer.total_training_steps=1", "trainer.val_before_train=false", *overrides],
        fingerprint=True,
        wrap=lambda components: spies.append(_ActorSpy(components)),
    )
    assert run.error is None, run.error
    return run, spies[0].calls


@pytest.mark.ray
@pytest.mark.slow
def test_fused_and_recomputed_old_log_probs_give_the_same_first_update(ray_session, trainer_run, metric_diff, tmp_path):
    # FAST: 2 prompts x n=2 on one rank, quickstart's ppo_mini_batch_size 4 >= 2 prompts: on-policy
    fused, fused_calls = _run(trainer_run, tmp_path / "fused", [])
    recomputed, recomputed_calls = _run(
        trainer_run, tmp_path / "recompute", ["algorithm.rollout_correction.fuse_on_policy_old_log_prob=false"]
    )

    # fused: no recompute pass, and the update gets no old log-probs (it takes its own); recompute: both the opposite
    assert fused_calls == [("update_policy", False)]
    assert recomputed_calls == [("compute_log_prob", False), ("update_policy", True)]
    (a,), (b,) = fused.history, recomputed.history
    assert "timing_s/old_log_prob" not in a and "timing_per_image_ms/old_log_prob" not in a
    assert "timing_s/old_log_prob" in b

    # the first update in fp32 is on-policy in both modes, and the |old - rollout| gap is reported in both
    for row in (a, b):
        assert abs(row["actor/ratio_mean"] - 1) < 1e-6 and abs(row["actor/ppo_kl"]) < 1e-6
        assert 0 <= row["actor/rollout_logprob_diff_max"] < 1e-4
    # identical metrics (timings excepted), parameters and AdamW state
    assert metric_diff(a, b) == []
    assert fused.fingerprint["step"] == recomputed.fingerprint["step"] == 1
    for part in ("model", "optim"):
        assert fused.fingerprint[part].keys() == recomputed.fingerprint[part].keys()
    for name, value in fused.fingerprint["model"].items():
        assert torch.equal(value, recomputed.fingerprint["model"][name]), name
    for param, state in fused.fingerprint["optim"].items():
        for key, value in state.items():
            assert torch.equal(value, recomputed.fingerprint["optim"][param][key]), (param, key)


@pytest.mark.ray
@pytest.mark.slow
def test_two_mini_batches_still_recompute_the_old_log_probs(ray_session, trainer_run, tmp_path):
    # 2 prompts in mini-batches of 1: two optimizer steps, the second sees changed weights, so no fusing
    run, calls = _run(trainer_run, tmp_path, ["actor_rollout_ref.actor.ppo_mini_batch_size=1"])
    assert calls == [("compute_log_prob", False), ("update_policy", True)]
    (row,) = run.history
    assert row["timing_s/old_log_prob"] > 0
    assert abs(row["actor/ratio_mean"] - 1) > 1e-6  # the second mini-batch sees the first one's step
    assert 0 <= row["actor/rollout_logprob_diff_max"] < 1e-4
