"""GPU checks of `DiffusersFSDPEngine` (one CUDA device, NCCL world of one): bf16 compute, CPU offload."""

from __future__ import annotations

import pytest
import torch

from .conftest import sample_trajectory

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _update_batch(traj, old):
    batch = traj.clone()
    batch["old_log_probs"] = old.cpu()
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])
    return batch


@pytest.mark.parametrize(("dtype", "atol"), [("float32", 1e-5), ("bfloat16", 5e-2)])
def test_engine_cuda_log_probs_match_cpu_sampler(tiny_qwen_image_pipe, tiny_qwen_image_path, dtype, atol):
    from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
    from verl_omni.engine import DiffusersFSDPEngine

    traj = sample_trajectory(tiny_qwen_image_pipe)
    actor = DiffusionActorConfig(rollout_n=2, ppo_mini_batch_size=2, fsdp_config={"dtype": dtype})
    model = DiffusionModelConfig(path=str(tiny_qwen_image_path), lora_rank=4, lora_alpha=8)
    engine = DiffusersFSDPEngine.from_pretrained(model, actor, device="cuda")
    old = engine.compute_log_prob(traj)["old_log_probs"]
    diff = (old.cpu() - traj["log_probs"]).abs().max().item()
    print(f"{dtype}: max |engine(cuda) - sampler(cpu fp32)| log-prob = {diff:.3e}")
    assert diff < atol
    metrics = engine.update_policy(_update_batch(traj, old))
    # old log-probs recomputed by the engine itself: the first update is on-policy up to kernel numerics
    assert abs(metrics["actor/ratio_mean"] - 1.0) < (1e-6 if dtype == "float32" else 1e-3)
    assert metrics["actor/grad_norm"] > 0


@pytest.mark.parametrize(
    ("param_offload", "optimizer_offload"), [(True, True), (False, True)], ids=["params+optimizer", "optimizer"]
)
def test_engine_cuda_offload_gives_the_same_update(
    tiny_qwen_image_pipe, tiny_qwen_image_path, param_offload, optimizer_offload
):
    from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
    from verl_omni.engine import DiffusersFSDPEngine

    traj = sample_trajectory(tiny_qwen_image_pipe)
    results = []
    for offload in (False, True):
        fsdp = {"dtype": "float32", "param_offload": offload and param_offload}
        fsdp["optimizer_offload"] = offload and optimizer_offload
        actor = DiffusionActorConfig(
            rollout_n=2, ppo_mini_batch_size=1, optim={"lr": 1e-3, "eps": 1e-6}, fsdp_config=fsdp
        )  # two optimizer steps: the second reads the offloaded AdamW state
        model = DiffusionModelConfig(path=str(tiny_qwen_image_path))
        engine = DiffusersFSDPEngine.from_pretrained(model, actor, device="cuda")
        old = engine.compute_log_prob(traj)["old_log_probs"]
        engine.update_policy(_update_batch(traj, old))
        assert engine.global_step == 2
        results.append(engine.export_weights())
    for name, w in results[0].items():
        torch.testing.assert_close(results[1][name], w, atol=1e-5, rtol=0, msg=name)
