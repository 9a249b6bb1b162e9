"""Wan 2.1 on a tiny random `WanPipeline`: adapter, schedule, stock parity, frames per row, exact log-probs."""

import json
import math

import pytest
import torch
from diffusers import WanPipeline

from verl_omni.models import WanAdapter, adapter_for_folder, get_class
from verl_omni.pipelines import DiffusionSamplingConfig, WanPipelineWithLogProb, make_generators, sample_with_logprob
from verl_omni.reward.video import video_jpeg_compressibility

PROMPTS = ["a cat on a red chair", "two dogs in the snow"]
SAMPLING = {"n": 2, "num_inference_steps": 4, "height": 32, "width": 32, "num_frames": 5, "max_sequence_length": 32}


@pytest.fixture(scope="module")
def wan_pipe(tiny_wan_path):
    pipe = WanPipelineWithLogProb.from_pretrained(tiny_wan_path)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_registry_and_tiny_folder(tiny_wan_path):
    assert get_class("wan") is WanAdapter and get_class("WanPipeline") is WanAdapter
    index = json.loads((tiny_wan_path / "model_index.json").read_text())
    assert index["_class_name"] == "WanPipeline"
    for name in ("transformer", "vae", "text_encoder", "tokenizer", "scheduler"):
        assert (tiny_wan_path / name).is_dir(), name
    adapter = adapter_for_folder(tiny_wan_path)
    assert isinstance(adapter, WanAdapter) and adapter.shift == 3.0
    assert adapter.latent_shape(32, 64, num_frames=9) == (16, 3, 4, 8)
    # the real checkpoints ship UniPC with flow_shift: the SDE scheduler takes it as its shift
    unipc = WanAdapter({"in_channels": 16}, {}, {"_class_name": "UniPCMultistepScheduler", "flow_shift": 5.0})
    assert unipc.build_scheduler().config.shift == 5.0


def test_schedule_is_the_fixed_shift_at_any_resolution(wan_pipe):
    adapter, sched = wan_pipe.adapter, wan_pipe.sde_scheduler
    adapter.set_timesteps(sched, 6, 32, 32)
    small = sched.sigmas.clone()
    adapter.set_timesteps(sched, 6, 256, 256)
    assert torch.equal(sched.sigmas, small)

    def shifted(x):  # σ ← sσ / (1 + (s − 1)σ), s = 3
        return 3.0 * x / (1 + 2.0 * x)

    # the stock grid: linspace from σ_max = 1 to the shifted smallest training sigma, then shifted
    want = shifted(torch.linspace(1.0, shifted(1 / 1000), 6, dtype=torch.float64)).tolist()
    assert sched.sigmas[:6].tolist() == pytest.approx(want, abs=1e-6) and sched.sigmas[6] == 0


def _sample(pipe, prompts=PROMPTS, generator=None, **overrides):
    """`sample_with_logprob` without decoding (the video VAE is the slow part on a CPU)."""
    config = DiffusionSamplingConfig(**{**SAMPLING, **overrides})
    with torch.no_grad():
        return sample_with_logprob(pipe, pipe.adapter, pipe.sde_scheduler, prompts, config, generator, decode=False)


def test_noise_zero_matches_stock_pipeline(wan_pipe):
    """At noise_level 0 (CFG on) the log-prob pipeline reproduces the stock `WanPipeline.__call__` bit for bit."""
    guidance = 5.0
    ours = wan_pipe.generate_with_logprob(
        PROMPTS, **{**SAMPLING, "n": 1}, noise_level=0.0, guidance_scale=guidance, generator=make_generators(5, 2)
    )
    stock = WanPipeline.__call__(
        wan_pipe, PROMPTS, height=32, width=32, num_frames=5, num_inference_steps=4, guidance_scale=guidance,
        max_sequence_length=32, generator=make_generators(5, 2), output_type="pt",
    ).frames  # fmt: skip
    assert ours.images.shape == (2, 5, 3, 32, 32) and ours.images.dtype == torch.uint8
    assert torch.equal(ours.images, (stock.float() * 255).round().clamp(0, 255).to(torch.uint8))


def test_cfg_runs_two_forwards_and_the_trajectory_is_5d(wan_pipe):
    calls = []
    handle = wan_pipe.transformer.register_forward_pre_hook(
        lambda mod, args, kwargs: calls.append(tuple(kwargs["hidden_states"].shape)), with_kwargs=True
    )
    try:
        out = _sample(wan_pipe, seed=0, guidance_scale=4.0)
    finally:
        handle.remove()
    assert calls == [(4, 16, 2, 4, 4)] * 8  # 4 steps x (cond, uncond)
    traj = out.trajectory
    assert traj["latents"].shape == (4, 4, 16, 2, 4, 4)  # window K = 3 steps + its start
    assert traj["prompt_embeds"].shape == (4, 32, 32) and traj["negative_prompt_embeds"].shape == (4, 32, 32)
    assert traj["num_frames"].tolist() == [5] * 4


def test_frames_never_mix_across_rows(wan_pipe):
    """Each row sampled in a batch of four equals the same row (same generator) sampled alone, every latent frame of
    the window; and the VAE decodes a row of a batch as it decodes that row alone."""
    window = {"noise_level": 0.7, "guidance_scale": 4.0, "sde_window_size": 2, "sde_window_range": [1, 3]}
    batch = _sample(wan_pipe, generator=make_generators(3, 4), **window).trajectory
    for r in range(4):
        alone = _sample(wan_pipe, [PROMPTS[r // 2]], generator=[make_generators(3, 4)[r]], n=1, **window).trajectory
        assert torch.equal(alone["step_indices"], batch["step_indices"][r : r + 1])
        torch.testing.assert_close(alone["latents"][0], batch["latents"][r], atol=1e-5, rtol=0)
    final = batch["latents"][[0, 2], -1]  # two prompts
    both = wan_pipe.adapter.decode(wan_pipe, final, 32, 32)
    first = wan_pipe.adapter.decode(wan_pipe, final[:1], 32, 32)
    assert both.shape == (2, 5, 3, 32, 32)
    assert (both[0].int() - first[0].int()).abs().max() <= 1
    # the two prompts' videos get different rewards, and a video's reward does not depend on its batch
    rewards = video_jpeg_compressibility(both)
    assert rewards[0] != rewards[1]
    assert video_jpeg_compressibility(first).item() == pytest.approx(rewards[0].item(), abs=2e-5)


@pytest.fixture(scope="module")
def wan_fp64(tiny_wan_path):
    pipe = WanPipelineWithLogProb.from_pretrained(tiny_wan_path, dtype=torch.float64)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.parametrize("sde_type", ["sde", "cps"])
def test_rollout_log_probs_equal_the_scorers_recomputation_fp64(wan_fp64, sde_type):
    """fp64 transformer, CFG on: each stored log-prob equals the scorer's recomputation (one row at a time) and the
    closed-form Gaussian log-density `mean(−(x'−μ)²/(2s²) − log s − ½ log 2π)` of the stored transition, to 1e-6."""
    pipe = wan_fp64
    window = {"sde_window_size": 2, "sde_window_range": [0, 3]} if sde_type == "cps" else {}
    out = _sample(pipe, seed=7, guidance_scale=4.0, noise_level=0.8, sde_type=sde_type, **window)
    traj = out.trajectory
    k = traj["log_probs"].shape[1]
    assert k >= 2 and traj["log_probs"].abs().sum() > 0
    worst = worst_closed = 0.0
    for r in range(traj.shape[0]):
        row = traj[r : r + 1]
        for j in range(k):
            with torch.no_grad():
                res = pipe.adapter.score_step(pipe.transformer, pipe.sde_scheduler, row, j)
            worst = max(worst, (res.log_prob - row["log_probs"][:, j]).abs().item())
            x_next, mean, s = row["latents"][:, j + 1].double(), res.prev_sample_mean.double(), res.std.double()
            closed = (-((x_next - mean) ** 2) / (2 * s**2) - torch.log(s) - 0.5 * math.log(2 * math.pi)).mean()
            worst_closed = max(worst_closed, (closed - row["log_probs"][0, j].double()).abs().item())
    assert worst <= 1e-6, worst
    assert worst_closed <= 1e-6, worst_closed


def test_bad_input_names_the_parameter(wan_pipe):
    with pytest.raises(ValueError, match=r"num_frames: Wan videos have 4k \+ 1 frames .*got 6; set rollout.pipeline"):
        _sample(wan_pipe, num_frames=6)
    with pytest.raises(ValueError, match=r"height/width: must be multiples of 16 for Wan, got 40x32"):
        wan_pipe.adapter.latent_shape(40, 32)
    with pytest.raises(ValueError, match=r"max_sequence_length: Wan's UMT5 prompts take at most 512 tokens, got 600"):
        _sample(wan_pipe, max_sequence_length=600)
    with pytest.raises(ValueError, match=r"latents: expected shape \(B, 16, frames, 4, 4\)"):
        wan_pipe.adapter.velocity(wan_pipe.transformer, torch.zeros(2, 16, 4, 4), torch.ones(2), None,
                                  guidance_scale=1.0, height=32, width=32)  # fmt: skip


def test_image_models_refuse_frames(tiny_flux_pipe):
    with pytest.raises(ValueError, match=r"num_frames: flux generates images, got num_frames=5"):
        tiny_flux_pipe.generate_with_logprob(["a cat"], height=64, width=64, num_inference_steps=2, num_frames=5)
