"""Colocated training on GPUs with NCCL: one actor rank and one rollout server per GPU share it (1 and 2 GPUs).

Run on a machine with CUDA GPUs (the 2-GPU cases skip below two GPUs):

    nox -s tests -- packages/verl-omni/tests/trainer/test_trainer_gpu.py -q
"""

from __future__ import annotations

import importlib.util
import os
import traceback

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(torch.cuda.device_count() < 1, reason="needs a CUDA GPU"),
]

_GPUS = [
    pytest.param(1, id="1gpu"),
    pytest.param(2, id="2gpu", marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")),
]


@pytest.fixture(scope="module")
def ray_gpus():
    ray = pytest.importorskip("ray")
    ray.init(
        address="local",  # never join another run's Ray
        num_cpus=8,
        num_gpus=min(torch.cuda.device_count(), 2),
        include_dashboard=False,
        log_to_driver=os.environ.get("VERL_TEST_RAY_LOGS") == "1",
    )  # gpu_suite.sh vllm-trainer sets it
    yield ray
    ray.shutdown()


@pytest.mark.parametrize("rollout_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n_gpus", _GPUS)
def test_gpus_colocated_nccl(ray_gpus, trainer_run, tmp_path, n_gpus, rollout_dtype):
    nodes = []
    overrides = [
        "trainer.device=cuda",
        f"trainer.n_gpus_per_node={n_gpus}",
        "trainer.total_training_steps=3",
        "trainer.test_freq=3",
        f"actor_rollout_ref.rollout.dtype={rollout_dtype}",
        f"actor_rollout_ref.actor.fsdp_config.dtype={rollout_dtype}",
    ]
    run = trainer_run(tmp_path, overrides, wrap=lambda components: nodes.append(components.device))
    assert run.error is None, run.error
    assert nodes == ["cuda"]
    assert [row["rollout/weight_version"] for row in run.history] == [1.0, 2.0, 3.0]
    first = run.history[0]
    if rollout_dtype == "float32":  # fp32 on GPUs: on-policy up to kernel differences
        assert abs(first["actor/ratio_mean"] - 1) < 1e-4 and first["actor/rollout_logprob_diff_max"] < 1e-3
    for row in run.history:
        assert row["perf/max_memory_allocated_gb/update_actor"] > 0
        assert row["perf/weight_sync_cuda_ipc_servers"] >= 1  # rank 0's server shares its GPU: no host hop
    assert not torch.equal(run.val_images[0], run.val_images[3])


@pytest.mark.skipif(importlib.util.find_spec("vllm_omni") is None, reason='needs pip install "verl-omni[vllm-omni]"')
def test_gpu_trainer_on_vllm_omni_three_steps(ray_gpus, trainer_run, tmp_path):
    """`rollout.name=vllm_omni`: colocated, sleep/wake between phases, LoRA synced in memory each step."""
    overrides = [
        "trainer.device=cuda",
        "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=3",
        "trainer.test_freq=3",
        "actor_rollout_ref.rollout.name=vllm_omni",
        "actor_rollout_ref.rollout.enforce_eager=true",
    ]
    run = trainer_run(tmp_path, overrides)
    assert run.error is None, "".join(traceback.format_exception(run.error))
    assert [row["rollout/weight_version"] for row in run.history] == [1.0, 2.0, 3.0]
    first = run.history[0]
    print("vllm_omni trainer step 1:", {k: v for k, v in first.items() if "logprob" in k or "clipfrac" in k})
    assert first["actor/rollout_logprob_diff_max"] < 5e-2  # same trajectory, two engines: kernel differences only
    assert not torch.equal(run.val_images[0], run.val_images[3])


_POOLS = [
    pytest.param(False, id="colocated"),
    pytest.param(True, id="own-pool", marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")),
]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (pip install 'verl-core[vllm]')")
@pytest.mark.parametrize("stream", [False, True], ids=["batch", "stream"])
@pytest.mark.parametrize("own_pool", _POOLS)
def test_gpu_reward_model_on_vllm_scores_the_ocr_recipe(ray_gpus, trainer_run, tmp_path, own_pool, stream):
    """The OCR recipe's reward model on verl-core's vLLM server beside the diffusers rollout and the actor: colocated
    on one GPU (asleep outside the reward phases) or on a pool of its own, with `reward.stream` off or on (one
    request per prompt, so groups are scored while the others generate); prints the reward stage's whole and
    exposed time per step."""
    import pathlib

    from verl_core.testing.tiny_llm import build_tiny_vlm

    examples = pathlib.Path(__file__).resolve().parents[4] / "examples"
    spec = importlib.util.spec_from_file_location("make_ocr_dataset", examples / "ocr" / "make_ocr_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = module.write_dataset(tmp_path / "ocr", train_size=4, val_size=1)
    vlm = build_tiny_vlm(tmp_path / "vlm", hidden_size=256, num_heads=4, vision_heads=4)
    seen = {}
    overrides = [
        "trainer.device=cuda",
        "trainer.n_gpus_per_node=1",
        "trainer.total_training_steps=2",
        "trainer.val_before_train=true",
        "trainer.save_freq=-1",
        f"data.train_files={data['train']}",
        f"data.val_files={data['test']}",
        "data.train_batch_size=4",
        "reward.custom_reward_function.path=pkg://verl_omni.reward.ocr",
        "reward.custom_reward_function.name=compute_score_ocr",
        "+reward.custom_reward_function.reward_kwargs.max_tokens=16",
        "reward.reward_model.enable=true",
        f"reward.reward_model.model_path={vlm}",
        "reward.reward_model.rollout.name=vllm",
        "reward.reward_model.rollout.gpu_memory_utilization=0.15",
        "reward.reward_model.rollout.max_model_len=512",
        "reward.reward_model.rollout.prompt_length=256",
        "reward.reward_model.rollout.response_length=16",
        f"reward.stream={str(stream).lower()}",
        "actor_rollout_ref.rollout.agent.prompts_per_request=1",
    ]
    if own_pool:
        overrides += [
            "reward.reward_model.enable_resource_pool=true",
            "reward.reward_model.nnodes=1",
            "reward.reward_model.n_gpus_per_node=1",
        ]
    run = trainer_run(tmp_path, overrides, inspect=lambda c: seen.update(metrics=c.reward_model.server_metrics()))
    assert run.error is None, "".join(traceback.format_exception(run.error))
    assert len(run.history) == 2
    for row in run.history:
        assert 0.0 <= row["critic/rewards/min"] <= row["critic/rewards/max"] <= 1.0
    (server,) = seen["metrics"].values()
    assert server["counters"]["chat_completions"] == 1 + 2 * 4 * 2  # validation image, 2 steps x 4 prompts x n=2
    if not own_pool and not stream:  # asleep after launch, after validation and after each step's reward
        assert server["counters"]["sleeps"] == 4 and server["state"] == "sleeping"
    print(
        f"reward model on vLLM ({'own pool' if own_pool else 'colocated'}, stream={stream}): reward stage",
        [round(row["timing_s/reward"], 3) for row in run.history],
        "s, exposed",
        [round(row["timing_s/reward_exposed"], 3) for row in run.history],
        "s, gen",
        [round(row["timing_s/gen"], 3) for row in run.history],
        "s, step",
        [round(row["timing_s/step"], 3) for row in run.history],
        "s",
    )
