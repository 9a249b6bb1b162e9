"""GPU checks of `DiffusersFSDPEngine` (one CUDA device, NCCL world of one): bf16 compute, CPU offload, LoRA + KL."""

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


@pytest.mark.parametrize("model", ["qwen_image", "sd3"])
def test_engine_cuda_lora_kl_bf16_reference_update_loop(request, tiny_pipeline_paths, model):
    """The default recipe on one GPU: ref log-probs -> update -> ref log-probs -> update, LoRA + KL, bf16 compute.

    The reference pass (adapters disabled) is the engine's first forward; it must leave the next backward able to
    reduce in fp32 into the fp32 shards (it used to fail in FSDP2's post-backward, issue 9 item 0).
    """
    from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
    from verl_omni.engine import DiffusersFSDPEngine

    traj = sample_trajectory(request.getfixturevalue(f"tiny_{model}_pipe"))
    actor = DiffusionActorConfig(
        rollout_n=2,
        ppo_mini_batch_size=2,
        use_kl_loss=True,
        kl_loss_coef=0.04,
        optim={"lr": 5e-2, "weight_decay": 0.0},
        fsdp_config={"dtype": "bfloat16"},
    )
    lora = DiffusionModelConfig(path=str(tiny_pipeline_paths[model]), lora_rank=4, lora_alpha=8)
    engine = DiffusersFSDPEngine.from_pretrained(lora, actor, device="cuda")
    refs, kls = [], []
    for _ in range(2):
        ref = engine.compute_ref_log_prob(traj)
        refs.append(ref["ref_log_probs"].cpu())
        batch = _update_batch(traj, traj["log_probs"])
        batch["ref_prev_sample_mean"] = ref["ref_prev_sample_mean"].cpu()
        metrics = engine.update_policy(batch)
        assert metrics["actor/grad_norm"] > 0
        kls.append(metrics["actor/kl_loss"])
    print(f"{model}: kl_loss per update {kls}")
    assert kls[0] < 1e-10 < kls[1]  # lora_B starts at 0: policy == reference until the first step
    torch.testing.assert_close(refs[1], refs[0], rtol=0, atol=1e-6)  # the reference does not move
    # ... and is the model without LoRA
    base_actor = DiffusionActorConfig(rollout_n=2, ppo_mini_batch_size=2, fsdp_config={"dtype": "bfloat16",
                                      "forward_only": True})  # fmt: skip
    base = DiffusersFSDPEngine.from_pretrained(lora.evolve(lora_rank=0), base_actor, device="cuda")
    torch.testing.assert_close(base.compute_ref_log_prob(traj)["ref_log_probs"].cpu(), refs[0], rtol=0, atol=1e-6)
