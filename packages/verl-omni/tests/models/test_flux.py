"""FLUX.1 on a tiny random guidance-distilled `FluxPipeline`: adapter, schedule, stock parity, exact log-probs."""

import json
import math

import numpy as np
import pytest
import torch
from diffusers import FluxPipeline, FluxTransformer2DModel
from diffusers.pipelines.flux.pipeline_flux import calculate_shift as stock_calculate_shift

from verl_omni.models import FluxAdapter, adapter_for_folder, get_class
from verl_omni.pipelines import FluxPipelineWithLogProb, make_generators

PROMPTS = ["a cat on a red chair", "two dogs in the snow"]
SAMPLING = {"n": 2, "num_inference_steps": 4, "height": 64, "width": 64, "max_sequence_length": 32}


def test_registry_and_tiny_folder(tiny_flux_path):
    assert get_class("flux") is FluxAdapter and get_class("FluxPipeline") is FluxAdapter
    index = json.loads((tiny_flux_path / "model_index.json").read_text())
    assert index["_class_name"] == "FluxPipeline"
    for name in ("transformer", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler"):
        assert (tiny_flux_path / name).is_dir(), name
    adapter = adapter_for_folder(tiny_flux_path)
    assert isinstance(adapter, FluxAdapter) and adapter.guidance_embeds
    assert adapter.latent_shape(64, 128) == (4 * 8, 64)
    transformer = FluxTransformer2DModel.from_pretrained(tiny_flux_path, subfolder="transformer")
    assert len(transformer.transformer_blocks) == 2 and len(transformer.single_transformer_blocks) == 2


@pytest.mark.parametrize(("height", "width"), [(64, 64), (128, 256)])
def test_schedule_is_the_stock_resolution_dependent_shift(tiny_flux_pipe, height, width):
    """σ = linspace(1, 1/N, N) shifted with μ linear in the image tokens, as `FluxPipeline.__call__` computes it."""
    adapter, sched = tiny_flux_pipe.adapter, tiny_flux_pipe.sde_scheduler
    adapter.set_timesteps(sched, 6, height, width)
    cfg = tiny_flux_pipe.scheduler.config
    tokens = (height // 16) * (width // 16)
    mu = stock_calculate_shift(
        tokens, cfg.base_image_seq_len, cfg.max_image_seq_len, cfg.base_shift, cfg.max_shift
    )  # fmt: skip
    stock = tiny_flux_pipe.scheduler
    stock.set_timesteps(sigmas=np.linspace(1.0, 1 / 6, 6), mu=mu)
    assert torch.equal(sched.sigmas, stock.sigmas) and torch.equal(sched.timesteps, stock.timesteps)
    # closed form: σ' = e^μ / (e^μ + 1/σ − 1)
    want = [math.exp(mu) / (math.exp(mu) + 1 / s - 1) for s in np.linspace(1.0, 1 / 6, 6)]
    assert sched.sigmas[:6].tolist() == pytest.approx(want, abs=1e-6)


def test_larger_images_get_a_larger_shift(tiny_flux_pipe):
    adapter, sched = tiny_flux_pipe.adapter, tiny_flux_pipe.sde_scheduler
    adapter.set_timesteps(sched, 4, 64, 64)
    small = sched.sigmas.clone()
    adapter.set_timesteps(sched, 4, 256, 256)
    assert (sched.sigmas[1:4] > small[1:4]).all()


def test_latents_and_position_ids_match_stock(tiny_flux_pipe):
    pipe = tiny_flux_pipe
    ours = pipe.adapter.prepare_latents(2, 64, 128, make_generators(1, 2), "cpu")
    stock, stock_ids = pipe.prepare_latents(2, 16, 64, 128, torch.float32, "cpu", make_generators(1, 2))
    assert torch.equal(ours, stock)
    img_ids, txt_ids = pipe.adapter.position_ids(64, 128, 32, "cpu")
    assert torch.equal(img_ids, stock_ids) and torch.equal(txt_ids, torch.zeros(32, 3))


@pytest.mark.parametrize(("height", "width", "guidance"), [(64, 64, 3.5), (64, 128, 5.0)])
def test_noise_zero_matches_stock_pipeline(tiny_flux_pipe, height, width, guidance):
    """At noise_level 0 the log-prob pipeline reproduces the stock `FluxPipeline.__call__` bit for bit."""
    cfg = {**SAMPLING, "n": 1, "height": height, "width": width}
    ours = tiny_flux_pipe.generate_with_logprob(
        PROMPTS, noise_level=0.0, guidance_scale=guidance, generator=make_generators(5, 2), **cfg
    )
    stock = FluxPipeline.__call__(
        tiny_flux_pipe, PROMPTS, height=height, width=width, num_inference_steps=4, guidance_scale=guidance,
        max_sequence_length=32, generator=make_generators(5, 2), output_type="pt",
    ).images  # fmt: skip
    assert torch.equal(ours.images, (stock.float() * 255).round().clamp(0, 255).to(torch.uint8))


def test_trajectory_has_no_negative_branch_and_one_forward_per_step(tiny_flux_pipe):
    calls = []
    handle = tiny_flux_pipe.transformer.register_forward_pre_hook(
        lambda mod, args, kwargs: calls.append(kwargs["hidden_states"].shape[0]), with_kwargs=True
    )
    try:
        out = tiny_flux_pipe.generate_with_logprob(PROMPTS, seed=0, guidance_scale=3.5, **SAMPLING)
    finally:
        handle.remove()
    assert calls == [4] * 4  # 4 rows, 4 steps: no CFG batch
    traj = out.trajectory
    assert traj["latents"].shape == (4, 4, 16, 64)
    assert traj["prompt_embeds"].shape == (4, 32, 64) and traj["pooled_prompt_embeds"].shape == (4, 32)
    assert not any(k.startswith("negative") for k in set(traj.keys()))
    assert traj["guidance_scale"].tolist() == [3.5] * 4


def _guidance_seen(transformer, fn):
    seen = []
    handle = transformer.register_forward_pre_hook(
        lambda mod, args, kwargs: seen.append(kwargs["guidance"]), with_kwargs=True
    )
    try:
        fn()
    finally:
        handle.remove()
    return seen


def test_guidance_embedding_reaches_the_transformer_in_rollout_and_in_scoring(tiny_flux_pipe):
    pipe = tiny_flux_pipe
    holder = {}
    seen = _guidance_seen(
        pipe.transformer,
        lambda: holder.update(out=pipe.generate_with_logprob(PROMPTS, seed=3, guidance_scale=3.5, **SAMPLING)),
    )
    assert len(seen) == 4 and all(g.tolist() == [3.5] * 4 for g in seen)
    traj = holder["out"].trajectory
    seen = _guidance_seen(
        pipe.transformer, lambda: pipe.adapter.score_step(pipe.transformer, pipe.sde_scheduler, traj, 0)
    )
    assert seen[0].tolist() == [3.5] * 4
    # and the embedding changes the model: the same seed at guidance 1 gives other images
    other = pipe.generate_with_logprob(PROMPTS, seed=3, guidance_scale=1.0, **SAMPLING)
    assert (other.images.float() - holder["out"].images.float()).abs().mean() > 0.5


@pytest.fixture(scope="module")
def flux_fp64(tiny_flux_path):
    pipe = FluxPipelineWithLogProb.from_pretrained(tiny_flux_path, dtype=torch.float64)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.mark.parametrize("sde_type", ["sde", "cps"])
def test_rollout_log_probs_equal_the_scorers_recomputation_fp64(flux_fp64, sde_type):
    """fp64 transformer: each stored log-prob equals the scorer's recomputation (micro-batches of one row) and the
    closed-form Gaussian log-density `mean(−(x'−μ)²/(2s²) − log s − ½ log 2π)` of the stored transition, to 1e-6."""
    pipe = flux_fp64
    window = {"sde_window_size": 2, "sde_window_range": [0, 3]} if sde_type == "cps" else {}
    out = pipe.generate_with_logprob(
        PROMPTS, seed=7, guidance_scale=3.5, noise_level=0.8, sde_type=sde_type, **window, **SAMPLING
    )
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


def test_bad_input_names_the_parameter(tiny_flux_pipe):
    with pytest.raises(ValueError, match=r"height/width: must be multiples of 16 for FLUX, got 72x64"):
        tiny_flux_pipe.adapter.latent_shape(72, 64)
    with pytest.raises(ValueError, match=r"max_sequence_length: FLUX's T5 prompts take at most 512 tokens, got 600"):
        tiny_flux_pipe.generate_with_logprob(PROMPTS, **{**SAMPLING, "max_sequence_length": 600})
    with pytest.raises(ValueError, match="latents"):
        tiny_flux_pipe.adapter.velocity(
            tiny_flux_pipe.transformer, torch.zeros(2, 3, 7), torch.ones(2), None, guidance_scale=3.5, height=64,
            width=64,
        )  # fmt: skip
