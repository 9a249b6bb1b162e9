"""The adapter's velocity / score_step run unchanged on FSDP2- and peft-wrapped transformers (training path)."""

import pytest
import torch
import torch.distributed as dist
from diffusers import QwenImageTransformer2DModel, SD3Transformer2DModel
from peft import LoraConfig, get_peft_model
from torch.distributed.fsdp import fully_shard

LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["to_q", "to_k", "to_v"]}
TRANSFORMER_CLS = {"qwen_image": QwenImageTransformer2DModel, "sd3": SD3Transformer2DModel}


@pytest.fixture(params=["qwen_image", "sd3"])
def model(request):
    return request.param


@pytest.fixture
def trajectory(model, request, tiny_sampling_config):
    pipe = request.getfixturevalue(f"tiny_{model}_pipe")
    cfg = tiny_sampling_config.evolve(seed=4, n=1, guidance_scale=4.0, sde_window_size=1, sde_window_range=[1, 3])
    return pipe, pipe.generate_with_logprob(["a cat on a red chair", "two dogs"], cfg).trajectory


@pytest.fixture
def single_process_group(tmp_path):
    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_fsdp2_with_lora_scores_like_the_sampler(model, trajectory, single_process_group, request):
    pipe, traj = trajectory
    module = TRANSFORMER_CLS[model].from_pretrained(
        request.getfixturevalue(f"tiny_{model}_path"), subfolder="transformer"
    )
    module.add_adapter(LoraConfig(**LORA))  # B = 0: same function as the base model
    for block in module.transformer_blocks:
        fully_shard(block)
    fully_shard(module)
    out = pipe.adapter.score_step(module, pipe.adapter.build_scheduler(), traj, 0)
    torch.testing.assert_close(out.log_prob, traj["log_probs"][:, 0], atol=1e-5, rtol=0)
    out.log_prob.mean().backward()
    lora_grads = [p.grad for n, p in module.named_parameters() if "lora_" in n and p.grad is not None]
    assert lora_grads and any(g.abs().sum() > 0 for g in lora_grads)


def test_peft_model_wrapper_scores_like_the_sampler(model, trajectory, request):
    pipe, traj = trajectory
    base = TRANSFORMER_CLS[model].from_pretrained(
        request.getfixturevalue(f"tiny_{model}_path"), subfolder="transformer"
    )
    wrapped = get_peft_model(base, LoraConfig(**LORA))
    with torch.no_grad():
        out = pipe.adapter.score_step(wrapped, pipe.adapter.build_scheduler(), traj, 0)
    torch.testing.assert_close(out.log_prob, traj["log_probs"][:, 0], atol=1e-5, rtol=0)
