"""`FlowGRPOTrainer` phases with stand-in components (no Ray): the weight-sync check and the pinned SDE window."""

from __future__ import annotations

import pytest

from verl_omni.trainer.config import load_config
from verl_omni.trainer.flow_grpo_trainer import FlowGRPOTrainer, WeightSyncError


class _Actor:
    world_size = 1

    def __init__(self, serves_pushed: bool):
        self.serves_pushed = serves_pushed
        self.pushed = []
        self.dtypes = []
        self.transports = []

    def call(self, method, *args, **kwargs):
        assert method == "push_weights"
        version = args[1]
        self.pushed.append(version)
        self.dtypes.append(args[4])
        self.transports.append(args[5])
        served = [version, version if self.serves_pushed else 0]  # what the two servers answered
        return [{"bytes": 8.0, "export_s": 0.0, "send_s": 0.0, "shm_servers": 2.0, "served_versions": served}]


class _Rollout:
    def __init__(self):
        self.woken = 0

    def wake_up(self):
        self.woken += 1

    def weight_targets(self):
        return ["http://server-0", "http://server-1"]


def _trainer(tiny_qwen_image_path, serves_pushed: bool, overrides=()):
    from verl_omni.trainer.components import TrainerComponents

    config = load_config([f"actor_rollout_ref.model.path={tiny_qwen_image_path}", *overrides], config_name="quickstart")
    trainer = FlowGRPOTrainer(config)
    actor, rollout = _Actor(serves_pushed), _Rollout()
    trainer.c = TrainerComponents(
        actor=actor, rollout=rollout, reward=None, prompts=None, val_records=[], tracker=None,
        checkpoints=None, total_steps=1, device="cpu",
    )  # fmt: skip
    return trainer, actor, rollout


def test_weight_sync_wakes_the_rollout_and_checks_every_server(tiny_qwen_image_path):
    trainer, actor, rollout = _trainer(tiny_qwen_image_path, serves_pushed=True)
    metrics = trainer._sync_weights(7)
    assert actor.pushed == [7] and rollout.woken == 1
    assert metrics["rollout/weight_version"] == 7.0 and trainer.weight_version == 7
    assert actor.transports == ["auto"] and metrics["perf/weight_sync_shm_servers"] == 2.0
    assert actor.dtypes == ["float32"]  # the quickstart's rollout dtype


def test_weights_are_sent_in_the_rollouts_dtype(tiny_qwen_image_path):
    trainer, actor, _ = _trainer(
        tiny_qwen_image_path, serves_pushed=True, overrides=["actor_rollout_ref.rollout.dtype=bf16"]
    )
    trainer._sync_weights(2)
    assert actor.dtypes == ["bfloat16"]  # half the bytes of the fp32 master weights


def test_a_server_that_does_not_serve_the_pushed_version_is_an_error_naming_it(tiny_qwen_image_path):
    trainer, _, _ = _trainer(tiny_qwen_image_path, serves_pushed=False)
    with pytest.raises(
        WeightSyncError, match=r"rollout server\(s\) \[1\] serve weight version\(s\) \[0\] .* version 3"
    ):
        trainer._sync_weights(3)


def test_the_sde_window_is_pinned_per_step_and_reproducible(tiny_qwen_image_path):
    overrides = [
        "actor_rollout_ref.rollout.algo.sde_window_size=2",
        "actor_rollout_ref.rollout.algo.sde_window_range=[0,3]",
    ]
    trainer, _, _ = _trainer(tiny_qwen_image_path, serves_pushed=True, overrides=overrides)
    starts = []
    for step in range(1, 30):
        sampling, start = trainer._step_sampling(step)
        assert sampling.sde_window_range == [start, start + 2] and sampling.sde_window_size == 2
        starts.append(start)
    assert set(starts) == {0, 1}  # start in {r0 .. r1 - K} = {0, 1}
    assert [trainer._step_sampling(s)[1] for s in range(1, 30)] == starts  # a step's window depends on the step only


def test_init_ray_starts_a_private_local_instance_unless_an_address_is_given(monkeypatch):
    """With no `ray_init.address` and no RAY_ADDRESS, never join a Ray another job started on this host."""
    import ray

    from verl_omni.trainer.placement import init_ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert init_ray(load_config([]))
    assert calls[-1]["address"] == "local" and calls[-1]["num_cpus"] >= 1
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    init_ray(load_config([]))
    assert calls[-1]["address"] == "10.0.0.1:6379" and "num_cpus" not in calls[-1]


def test_request_overhead_is_the_round_trip_minus_the_server_latency():
    from verl_omni.trainer.rollout import request_overhead_metrics

    got = request_overhead_metrics([1.0, 2.0], [0.9, 1.5])
    assert got["timing_s/gen_request_overhead"] == pytest.approx(0.3)
    assert got["timing_share/gen_request_overhead"] == pytest.approx(0.6 / 3.0)
    assert request_overhead_metrics([1.0], [float("nan")]) == {}  # a backend that does not report its latency
    assert request_overhead_metrics([1.0, 2.0], [0.5]) == {}


def test_auto_grouping_sends_one_prompt_a_request_on_backends_without_prompt_lists():
    from verl_omni.config import DiffusionRolloutConfig
    from verl_omni.trainer.rollout import prompts_per_request

    def grouping(name: str, value: int) -> int:
        return prompts_per_request(DiffusionRolloutConfig(name=name, agent={"prompts_per_request": value}))

    assert grouping("diffusers", 0) == 0  # auto: the agent loop splits the prompts over the servers
    assert grouping("vllm_omni", 0) == 1  # its server refuses a prompt list
    assert grouping("vllm_omni", 2) == 2 and grouping("diffusers", 1) == 1  # a set value is passed as set


def test_request_overhead_counts_each_request_once():
    from verl_omni.trainer.rollout import per_request, request_overhead_metrics

    # three prompts in two requests (2 + 1): the 2-prompt request's times are listed twice, counted once
    client = per_request([1.0, 1.0, 3.0], [0, 0, 1])
    server = per_request([0.5, 0.5, 2.0], [0, 0, 1])
    assert client == [1.0, 3.0] and server == [0.5, 2.0]
    assert request_overhead_metrics(client, server)["timing_s/gen_request_overhead"] == 0.75
    assert per_request([1.0, 2.0], []) == [1.0, 2.0]  # a loop that does not say: per prompt
