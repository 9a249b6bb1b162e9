"""The trainer on a local Ray (CPU, tiny Qwen-Image): the update points the right way, and the rollout serves the
actor's weights after every sync (a sync that silently loads nothing fails the run at its first sync)."""

from __future__ import annotations

import pytest
import torch

from verl_omni.trainer.report import learning_margin, read_metrics

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _quickstart(model_path, tmp_path, *extra: str) -> list[str]:
    """`verl-omni-train` arguments: the quickstart (its seeds, batch, lr) with the run folder in `tmp_path`."""
    return [
        "--config-name",
        "quickstart",
        f"actor_rollout_ref.model.path={model_path}",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        *extra,
    ]


def test_the_quickstart_update_raises_the_reward_by_more_than_3_standard_errors(
    ray_session, tiny_qwen_image_path, tmp_path, capsys
):
    """12 seeded quickstart steps (4 prompts x 8 images, lr 7e-3): mean reward of the last 3 steps minus the first 3
    (`report.learning_margin`, the line `verl-omni-train` prints) must exceed +3 standard errors. On main it is
    +44.4 (deterministic: fp32 on the CPU, fixed seeds); the whole test takes about 35 s.

    Mutations run by hand (each edited into the code, this test run, then restored), and what this test saw:

    * advantages negated (`batch["advantages"] = -compute_flow_grpo_advantages(...)` in `FlowGRPOTrainer.train`):
      FAILED, margin -36.2.
    * advantages rolled by one sample within the batch (`torch.roll(batch["advantages"], 1, dims=0)` after step 5):
      FAILED, margin -3.2.
    * the log-ratio flipped in the loss (`neg_log_ratio = log_prob - old_log_prob` in `verl_omni.algos.flow_grpo`):
      FAILED, margin -36.2, the same run as the negation (the update is on-policy: ratio 1, so the flip only flips
      the gradient). "Old log-probs taken after the update" cannot be written in this update, which takes them from
      its own forwards.
    * the `diffusers` server drops LoRA updates (its `_engine_finish_weights` loads nothing, the version still
      advances): FAILED at step 1, `WeightSyncError` of the served-weights check ("rollout server 0 at http://...:
      64 of 68 lora tensors differ from the actor's").
    """
    from verl_omni.trainer.main import run

    argv = _quickstart(
        tiny_qwen_image_path,
        tmp_path,
        "trainer.total_training_steps=12",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    )
    assert run(argv) == 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 13))
    margin = learning_margin(rows)
    assert margin is not None
    out = capsys.readouterr().out
    assert f"= {margin['margin']:.1f} standard errors" in out  # the report the user reads is this margin
    assert margin["margin"] > 3.0, margin


class _ServedWeightsProbe:
    """Wraps the actor ranks: after each of the first `steps` pushes, every server's served LoRA tensors must equal
    the actor's trainable parameters (its own state dict, not the export the push sends), bit for bit."""

    def __init__(self, components, steps: int) -> None:
        self.inner, self.rollout, self.steps = components.actor, components.rollout, steps
        self.seen: list[tuple[int, int, float]] = []  # (version, tensors compared, sum of |served| of server 0)
        components.actor = self

    def push_weights(self, *args, **kwargs):
        out = self.inner.push_weights(*args, **kwargs)
        if len(self.seen) < self.steps:
            self._compare(version=args[1])
        return out

    def _compare(self, version: int) -> None:
        model = self.inner.state_fingerprint()[0]["model"]
        actor = {name.replace(".default.", "."): t for name, t in model.items()}  # peft's adapter name dropped
        served = self.rollout.served_weights(sorted(actor), "lora")
        assert sorted(served) == list(range(self.rollout.num_servers))
        for rank, tensors in served.items():
            assert not isinstance(tensors, BaseException), (rank, tensors)
            differ = [n for n, t in actor.items() if not torch.equal(tensors[n], t.to(tensors[n].dtype))]
            assert differ == [], f"step {version}: server {rank} serves {len(differ)} other tensors, e.g. {differ[:3]}"
        self.seen.append((version, len(actor), float(sum(t.abs().sum() for t in served[0].values()))))

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_every_server_serves_the_actors_weights_after_the_syncs_of_step_1_and_step_2(
    ray_session, trainer_run, tmp_path
):
    """Two actor ranks, two servers. Mutation run by hand: the `diffusers` server's `_engine_finish_weights` loads
    no LoRA tensor (the version still advances): FAILED, "step 1: server 0 serves 64 other tensors"."""
    probes = []
    run = trainer_run(
        tmp_path,
        ["trainer.n_gpus_per_node=2", "trainer.total_training_steps=2", "trainer.val_before_train=false"],
        wrap=lambda components: probes.append(_ServedWeightsProbe(components, steps=2)),
    )
    assert run.error is None, run.error
    (v1, n1, s1), (v2, n2, s2) = probes[0].seen
    assert (v1, v2) == (1, 2) and n1 == n2 > 0
    assert s1 != s2  # the second sync carried other values: the servers follow the actor step by step


def test_a_sync_that_sends_nothing_fails_the_run_at_its_first_sync_naming_the_server_and_the_key(
    ray_session, tiny_qwen_image_path, fast_overrides, tmp_path, monkeypatch, capsys
):
    """The mutation: the trainer's push addresses no server (actor rank 0 exports, sends nothing, answers no
    version), so the version check has nothing to compare; only the served-weights read-back notices.

    Mutation run by hand: the call `self._check_served_weights(version)` in `FlowGRPOTrainer._sync_weights` removed:
    FAILED, the run trained step 1 against the frozen sampler and stopped only at step 2 on the trajectories'
    weight version ("error at step 2: WeightSyncError: rollout server(s) [0] served weight version(s) [0]")."""
    from verl_omni.trainer import components as components_module
    from verl_omni.trainer.main import EXIT_FAILED, run

    real_build = components_module.build_components

    class _PushToNobody:
        def __init__(self, inner) -> None:
            self.inner = inner

        def push_weights(self, targets, *args, **kwargs):
            return self.inner.push_weights([], *args, **kwargs)  # the sync silently does nothing

        def __getattr__(self, name):
            return getattr(self.inner, name)

    def build_with_silent_push(prepared, **kwargs):
        built = real_build(prepared, **kwargs)
        built.actor = _PushToNobody(built.actor)
        return built

    monkeypatch.setattr(components_module, "build_components", build_with_silent_push)
    argv = _quickstart(
        tiny_qwen_image_path,
        tmp_path,
        *fast_overrides,
        "trainer.total_training_steps=2",
        "trainer.val_before_train=false",
    )
    assert run(argv) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "verl-omni-train: error at step 1: WeightSyncError: after the weight sync of version 1" in err, err
    assert "rollout server 0 at http://" in err and "lora tensors differ from the actor's" in err
    assert "trainer.check_served_weights=false turns it off" in err
    assert not (tmp_path / "run" / "metrics.jsonl").is_file() or not read_metrics(tmp_path / "run" / "metrics.jsonl")
