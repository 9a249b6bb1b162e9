"""Rollout/training log-prob consistency on a CUDA GPU (fp32 and bf16), tiny Qwen-Image and SD3."""

import pytest
import torch

from verl_omni.pipelines import QwenImagePipelineWithLogProb, StableDiffusion3PipelineWithLogProb, make_generators

PROMPTS = ["a cat on a red chair", "two dogs in the snow"]
CASES = {"qwen_image": (QwenImagePipelineWithLogProb, 4.0), "sd3": (StableDiffusion3PipelineWithLogProb, 4.5)}


@pytest.mark.gpu
@pytest.mark.parametrize("model", ["qwen_image", "sd3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("cfg_on", [False, True], ids=["no_cfg", "cfg"])
def test_cuda_logprob_consistency(model, dtype, cfg_on, request, tiny_sampling_config, record_property):
    cls, w = CASES[model]
    pipe = cls.from_pretrained(request.getfixturevalue(f"tiny_{model}_path"), dtype=dtype).to("cuda")
    pipe.set_progress_bar_config(disable=True)
    cfg = tiny_sampling_config.evolve(guidance_scale=w if cfg_on else 1.0, sde_window_size=2, sde_window_range=[0, 3])
    traj = pipe.generate_with_logprob(PROMPTS, cfg, make_generators(0, 4, "cuda")).trajectory
    assert traj["latents"].is_cuda and traj["log_probs"].dtype == torch.float32
    worst = 0.0
    for row in range(traj.shape[0]):  # training-style micro-batches of one row
        for j in range(traj["log_probs"].shape[1]):
            with torch.no_grad():
                out = pipe.adapter.score_step(pipe.transformer, pipe.sde_scheduler, traj[row : row + 1], j)
            worst = max(worst, (out.log_prob - traj["log_probs"][row : row + 1, j]).abs().max().item())
    record_property("max_abs_diff", worst)
    print(f"[cuda {model} {dtype} cfg={cfg_on}] max |logp_rollout - logp_train| = {worst:.3e}")
    assert worst <= (1e-5 if dtype == torch.float32 else 5e-3)
