"""`FlowGRPOTrainer` phases with stand-in components (no Ray): the weight-sync check and the pinned SDE window."""

from __future__ import annotations

import pytest
import torch

from verl_omni.trainer.config import load_config
from verl_omni.trainer.flow_grpo_trainer import FlowGRPOTrainer, WeightSyncError

_LORA = {"a.lora_A.weight": torch.arange(6.0).reshape(2, 3), "a.lora_B.weight": torch.ones(3, 2)}


class _Actor:
    world_size = 1

    def __init__(self, serves_pushed: bool):
        self.serves_pushed = serves_pushed
        self.pushed = []
        self.dtypes = []
        self.transports = []
        self.exported = []

    # the two methods of the typed actor-group surface (`ActorWorkerAPI`) the weight sync calls, one result per rank
    def exported_weights(self, dtype=None):  # what the served-weights check compares the servers with
        self.exported.append(dtype)
        return [{"kind": "lora", "tensors": {n: t.clone() for n, t in _LORA.items()}}]

    def push_weights(self, targets, version, bucket_bytes, timeout_s, dtype=None, transport="auto"):
        self.pushed.append(version)
        self.dtypes.append(dtype)
        self.transports.append(transport)
        served = [version, version if self.serves_pushed else 0]  # what the two servers answered
        return [{"bytes": 8.0, "export_s": 0.0, "send_s": 0.0, "shm_servers": 2.0, "served_versions": served}]


class _Rollout:
    def __init__(self):
        self.woken = 0
        self.served = {0: dict(_LORA), 1: dict(_LORA)}  # what each server reads back
        self.reads = []

    def served_weights(self, names, kind):
        self.reads.append((sorted(names), kind))
        if self.served is None:
            return None
        return {
            r: t if isinstance(t, BaseException) else {n: t[n] for n in names if n in t} for r, t in self.served.items()
        }

    def wake_up(self):
        self.woken += 1

    def weight_targets(self):
        return ["http://server-0", "http://server-1"]


def _trainer(tiny_qwen_image_path, serves_pushed: bool, overrides=()):
    from verl_omni.trainer.components import TrainerComponents

    config = load_config([f"actor_rollout_ref.model.path={tiny_qwen_image_path}", *overrides], config_name="quickstart")
    trainer = FlowGRPOTrainer(config)
    actor, rollout = _Actor(serves_pushed), _Rollout()
    trainer.components = TrainerComponents(
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


def test_the_first_sync_reads_every_served_tensor_back_once_per_run(tiny_qwen_image_path):
    trainer, actor, rollout = _trainer(tiny_qwen_image_path, serves_pushed=True)
    trainer._sync_weights(1)
    trainer._sync_weights(2)
    assert actor.exported == ["float32"]  # once per run, in the rollout's dtype
    assert rollout.reads == [(sorted(_LORA), "lora")]
    off, actor, rollout = _trainer(
        tiny_qwen_image_path, serves_pushed=True, overrides=["trainer.check_served_weights=false"]
    )
    off._sync_weights(1)
    assert actor.exported == [] and rollout.reads == []


def test_served_weights_unlike_the_actors_are_an_error_naming_server_tensors_and_the_key(tiny_qwen_image_path):
    trainer, _, rollout = _trainer(tiny_qwen_image_path, serves_pushed=True)
    stale = dict(_LORA)
    stale["a.lora_B.weight"] = torch.zeros(3, 2)  # LoRA B as initialised: the update never arrived
    rollout.served[1] = stale
    with pytest.raises(WeightSyncError) as info:
        trainer._sync_weights(1)
    message = str(info.value)
    assert "rollout server 1 at http://server-1: 1 of 2 lora tensors differ" in message
    assert "['a.lora_B.weight']" in message and "server 0" not in message
    assert "trainer.check_served_weights=false" in message and "version 1" in message


def test_a_server_that_serves_no_adapter_fails_the_check_with_its_read_back_error(tiny_qwen_image_path):
    trainer, _, rollout = _trainer(tiny_qwen_image_path, serves_pushed=True)
    rollout.served[0] = KeyError("lora tensor 'a.lora_A.weight' is not served (0 lora tensors are)")
    with pytest.raises(WeightSyncError, match=r"server 0 at http://server-0: 2 of 2 lora tensors .*is not served"):
        trainer._sync_weights(1)


def test_a_backend_that_cannot_read_back_the_kind_skips_the_check_with_a_warning(tiny_qwen_image_path, caplog):
    trainer, _, rollout = _trainer(tiny_qwen_image_path, serves_pushed=True)
    rollout.served = None
    with caplog.at_level("WARNING"):
        trainer._sync_weights(1)
    assert "served-weights check skipped" in caplog.text and "trainer.check_served_weights=false" in caplog.text


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
    from verl_omni.trainer.colocated_rollout import request_overhead_metrics

    got = request_overhead_metrics([1.0, 2.0], [0.9, 1.5])
    assert got["timing_s/gen_request_overhead"] == pytest.approx(0.3)
    assert got["timing_share/gen_request_overhead"] == pytest.approx(0.6 / 3.0)
    assert request_overhead_metrics([1.0], [float("nan")]) == {}  # a backend that does not report its latency
    assert request_overhead_metrics([1.0, 2.0], [0.5]) == {}


def test_auto_grouping_sends_one_prompt_a_request_on_backends_without_prompt_lists():
    from verl_omni.config import DiffusionRolloutConfig
    from verl_omni.trainer.colocated_rollout import prompts_per_request

    def grouping(name: str, value: int) -> int:
        return prompts_per_request(DiffusionRolloutConfig(name=name, agent={"prompts_per_request": value}))

    assert grouping("diffusers", 0) == 0  # auto: the agent loop splits the prompts over the servers
    assert grouping("vllm_omni", 0) == 1  # its server refuses a prompt list
    assert grouping("vllm_omni", 2) == 2 and grouping("diffusers", 1) == 1  # a set value is passed as set


def test_request_overhead_counts_each_request_once():
    from verl_omni.trainer.colocated_rollout import per_request, request_overhead_metrics

    # three prompts in two requests (2 + 1): the 2-prompt request's times are listed twice, counted once
    client = per_request([1.0, 1.0, 3.0], [0, 0, 1])
    server = per_request([0.5, 0.5, 2.0], [0, 0, 1])
    assert client == [1.0, 3.0] and server == [0.5, 2.0]
    assert request_overhead_metrics(client, server)["timing_s/gen_request_overhead"] == 0.75
    assert per_request([1.0, 2.0], []) == [1.0, 2.0]  # a loop that does not say: per prompt


@pytest.mark.parametrize("fixture", ["tiny_flux_path", "tiny_wan_path"])
def test_preflight_checks_that_vllm_omni_serves_the_model(fixture, request, tmp_path, monkeypatch):
    """`rollout.name=vllm_omni` on FLUX / Wan passes the driver's check with vllm-omni 0.26 and fails on 0.24 (their
    pipelines are written for 0.26), naming the model and the installed version; a Wan 2.2 folder fails too."""
    import shutil
    from types import SimpleNamespace

    from verl_omni.rollout.vllm_omni import served
    from verl_omni.trainer.components import preflight

    folder = request.getfixturevalue(fixture)
    argv = [f"actor_rollout_ref.model.path={folder}", "actor_rollout_ref.rollout.name=vllm_omni",
            f"trainer.default_local_dir={tmp_path / 'ckpt'}", f"trainer.run_dir={tmp_path / 'run'}"]  # fmt: skip
    installed = {"vllm-omni": "0.26.0"}
    monkeypatch.setattr(served, "metadata", SimpleNamespace(version=installed.__getitem__))
    preflight(load_config(argv, config_name="quickstart"))
    installed["vllm-omni"] = "0.24.0"
    refused = (
        r"rollout\.name=vllm_omni: .*cannot serve model '(flux|wan)' \((Flux|Wan)Adapter, .*\): its log-prob "
        r"pipeline is written for vllm-omni >= 0\.26 \(vllm-omni 0\.24\.0"
    )
    with pytest.raises(ValueError, match=refused):
        preflight(load_config(argv, config_name="quickstart"))
    if fixture == "tiny_wan_path":
        installed["vllm-omni"] = "0.26.0"
        wan22 = shutil.copytree(folder, tmp_path / "wan22")
        shutil.copytree(wan22 / "transformer", wan22 / "transformer_2")
        with pytest.raises(ValueError, match=r"cannot serve model 'wan' .*Wan 2\.2's second expert \(transformer_2\)"):
            preflight(load_config([f"actor_rollout_ref.model.path={wan22}", *argv[1:]], config_name="quickstart"))
