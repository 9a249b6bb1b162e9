"""Multi-process FSDP2 parity: 2 ranks give the same loss and updated weights as 1 rank on the same global batch.

CPU: gloo, fp32, full fine-tuning (every weight sharded). The one-rank reference runs in this process (a world of
one), the two ranks in a `torch.distributed.run` subprocess with the same worker code (dist_worker.py).
Tolerances (stated): loss rel 1e-6, grad norm rel 1e-5; old log-probs atol 1e-6; updated weights atol 1e-6 after
one AdamW step of lr 1e-3 (eps 1e-6), i.e. within 0.1 % of a step.
GPU (`gpu` marker, needs 2 CUDA devices): one vs two GPUs with NCCL, fp32 compute, full and LoRA, weights atol 1e-5.

LoRA + KL in bf16 compute (the default recipe's precision), reference log-probs -> update -> reference log-probs ->
update with the reference pass as the engine's first forward (`run_lora_kl_loop`): two gloo processes on the CPU
(`slow`) and two GPUs with NCCL (`gpu`), each against one process / one GPU.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest
import torch

WORKER = pathlib.Path(__file__).with_name("dist_worker.py")


def _load_worker():
    spec = importlib.util.spec_from_file_location("verl_omni_engine_dist_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(nproc: int, pipeline: pathlib.Path, batch: pathlib.Path, out: pathlib.Path, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", str(WORKER),
           "--pipeline", str(pipeline), "--batch", str(batch), "--out", str(out), *extra]  # fmt: skip
    dist_vars = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in dist_vars}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"{nproc}-process run failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}")
    return torch.load(out, weights_only=False)


@pytest.fixture(scope="module")
def saved_batch(qwen_trajectory, tmp_path_factory) -> pathlib.Path:
    batch = qwen_trajectory.clone()
    batch["advantages"] = torch.tensor([1.0, -0.5, 0.8, 0.3])  # non-zero mean: the loss is not 0
    path = tmp_path_factory.mktemp("dist") / "batch.pt"
    torch.save(batch.to_dict(), path)
    return path


def _assert_same(one: dict, two: dict, *, weight_atol: float) -> None:
    torch.testing.assert_close(two["old_log_probs"], one["old_log_probs"], atol=1e-6, rtol=0)
    assert two["metrics"]["actor/pg_loss"] == pytest.approx(one["metrics"]["actor/pg_loss"], rel=1e-6)
    assert two["metrics"]["actor/grad_norm"] == pytest.approx(one["metrics"]["actor/grad_norm"], rel=1e-5)
    assert set(two["weights"]) == set(one["weights"])
    for name, w1 in one["weights"].items():
        torch.testing.assert_close(two["weights"][name], w1, atol=weight_atol, rtol=0, msg=name)
    # the update did change the weights; with LoRA (B initialised to 0) the first step moves only lora_B,
    # since every lora_A gradient is B^T times something, i.e. exactly zero
    names = [n for n in one["weights"] if "lora_A" not in n]
    moved = [n for n in names if not torch.equal(one["weights"][n], one["initial_weights"][n])]
    assert len(moved) > len(names) // 2


def test_fsdp2_two_processes_match_one_process_gloo(tiny_qwen_image_path, saved_batch, tmp_path):
    one = _load_worker().run_update(
        str(tiny_qwen_image_path), str(saved_batch), device="cpu", lora_rank=0, dtype="float32"
    )
    two = _run(2, tiny_qwen_image_path, saved_batch, tmp_path / "two.pt")
    _assert_same(one, two, weight_atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full", "lora"])
def test_fsdp2_two_gpus_nccl_match_one_gpu(tiny_qwen_image_path, saved_batch, tmp_path, lora_rank):
    extra = ("--device", "cuda", "--lora-rank", str(lora_rank))
    one = _run(1, tiny_qwen_image_path, saved_batch, tmp_path / "one.pt", *extra)
    two = _run(2, tiny_qwen_image_path, saved_batch, tmp_path / "two.pt", *extra)
    _assert_same(one, two, weight_atol=1e-5)


def _assert_lora_kl_loop(one: dict, two: dict, *, ref_atol: float) -> None:
    for result in (one, two):
        kls = [m["actor/kl_loss"] for m in result["metrics"]]
        assert kls[0] < 1e-10 < kls[1], kls  # lora_B starts at 0: policy == reference until the first step
        assert all(m["actor/grad_norm"] > 0 for m in result["metrics"])
        # the reference (adapters disabled) does not move with the adapter
        torch.testing.assert_close(result["ref_log_probs"][1], result["ref_log_probs"][0], rtol=0, atol=ref_atol)
    torch.testing.assert_close(two["ref_log_probs"][0], one["ref_log_probs"][0], rtol=0, atol=ref_atol)
    assert set(two["weights"]) == set(one["weights"])


@pytest.mark.slow
def test_lora_kl_bf16_loop_two_processes_gloo(tiny_qwen_image_path, saved_batch, tmp_path):
    one = _load_worker().run_lora_kl_loop(str(tiny_qwen_image_path), str(saved_batch), device="cpu")
    two = _run(2, tiny_qwen_image_path, saved_batch, tmp_path / "two.pt", "--lora-kl-loop")
    _assert_lora_kl_loop(one, two, ref_atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
@pytest.mark.parametrize("pipeline_fixture", ["tiny_qwen_image_path", "tiny_sd3_path"], ids=["qwen", "sd3"])
def test_lora_kl_bf16_loop_two_gpus_nccl(request, pipeline_fixture, tmp_path):
    pipeline = request.getfixturevalue(pipeline_fixture)
    pipe_cls = "QwenImagePipelineWithLogProb" if "qwen" in pipeline_fixture else "StableDiffusion3PipelineWithLogProb"
    batch_path = _saved_batch_for(pipeline, pipe_cls, tmp_path)
    extra = ("--device", "cuda", "--lora-kl-loop")
    one = _run(1, pipeline, batch_path, tmp_path / "one.pt", *extra)
    two = _run(2, pipeline, batch_path, tmp_path / "two.pt", *extra)
    _assert_lora_kl_loop(one, two, ref_atol=5e-2)


def _saved_batch_for(pipeline: pathlib.Path, pipe_cls: str, tmp_path: pathlib.Path) -> pathlib.Path:
    """Sample a trajectory with the tiny pipeline at `pipeline` and save it with advantages for the worker."""
    import verl_omni.pipelines as pipelines

    from .conftest import sample_trajectory

    pipe = getattr(pipelines, pipe_cls).from_pretrained(pipeline)
    pipe.set_progress_bar_config(disable=True)
    batch = sample_trajectory(pipe)
    batch["advantages"] = torch.tensor([1.0, -0.5, 0.8, 0.3])
    path = tmp_path / "batch.pt"
    torch.save(batch.to_dict(), path)
    return path
