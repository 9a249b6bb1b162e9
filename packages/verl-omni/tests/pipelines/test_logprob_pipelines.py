"""Log-prob pipelines on tiny Qwen-Image and SD3: trajectory layout, rollout/training consistency, determinism."""

import pytest
import torch
from diffusers import QwenImagePipeline, StableDiffusion3Pipeline

from verl_omni.pipelines import make_generators
from verl_omni.pipelines.config import DiffusionSamplingConfig
from verl_omni.schedulers import CPS_LOGPROBS, SDE_TYPES

PROMPTS = ["a cat on a red chair", "two dogs in the snow"]
GUIDANCE = {"qwen_image": 4.0, "sd3": 4.5}


@pytest.fixture(params=["qwen_image", "sd3"])
def model(request):
    return request.param


@pytest.fixture
def pipe(model, request):
    return request.getfixturevalue(f"tiny_{model}_pipe")


def _max_diff_recompute(pipe, traj, micro_batch=None, **kw):
    sched = pipe.sde_scheduler
    worst = 0.0
    rows = traj.shape[0]
    micro_batch = micro_batch or rows
    for lo in range(0, rows, micro_batch):
        part = traj[lo : lo + micro_batch]
        for j in range(part["log_probs"].shape[1]):
            with torch.no_grad():
                out = pipe.adapter.score_step(pipe.transformer, sched, part, j, **kw)
            worst = max(worst, (out.log_prob - part["log_probs"][:, j]).abs().max().item())
    return worst


def test_trajectory_layout(model, pipe, tiny_sampling_config):
    cfg = tiny_sampling_config.evolve(
        seed=0, sde_window_size=2, sde_window_range=[0, 3], guidance_scale=GUIDANCE[model]
    )
    out = pipe.generate_with_logprob(PROMPTS, cfg)
    traj = out.trajectory
    b, k = 4, 2
    assert traj.batch_size == torch.Size([b])
    assert out.images.shape == (b, 3, 64, 64) and out.images.dtype == torch.uint8
    latent = (16, 64) if model == "qwen_image" else (16, 8, 8)
    assert traj["latents"].shape == (b, k + 1, *latent) and traj["latents"].dtype == torch.float32
    for key in ("log_probs", "timesteps", "sigmas", "sigmas_next"):
        assert traj[key].shape == (b, k) and traj[key].dtype == torch.float32, key
    assert traj["step_indices"].dtype == torch.int64
    start = int(traj["step_indices"][0, 0])
    assert traj["step_indices"].tolist() == [[start, start + 1]] * b
    assert traj["prompt_index"].tolist() == [0, 0, 1, 1]
    torch.testing.assert_close(traj["timesteps"], traj["sigmas"] * 1000)
    for key in ("sde_type", "cps_logprob", "num_inference_steps", "height", "width"):
        assert traj[key].shape == (b,) and traj[key].dtype == torch.int64, key
    assert traj["sde_type"].tolist() == [SDE_TYPES.index(cfg.sde_type)] * b
    assert traj["cps_logprob"].tolist() == [CPS_LOGPROBS.index(cfg.cps_logprob)] * b
    for key in pipe.adapter.cond_keys + pipe.adapter.negative_cond_keys:
        assert key in set(traj.keys())
    assert torch.isfinite(traj["log_probs"]).all()


@pytest.mark.parametrize("cfg_on", [False, True], ids=["no_cfg", "cfg"])
@pytest.mark.parametrize("sde_type", ["sde", "cps"])
def test_rollout_training_logprob_consistency_fp32(model, pipe, tiny_sampling_config, cfg_on, sde_type):
    cfg = tiny_sampling_config.evolve(
        seed=1, guidance_scale=GUIDANCE[model] if cfg_on else 1.0, sde_type=sde_type, noise_level=0.8,
        sde_window_size=2 if sde_type == "cps" else 0, sde_window_range=[0, 3] if sde_type == "cps" else None,
    )  # fmt: skip
    traj = pipe.generate_with_logprob(PROMPTS, cfg).trajectory
    # same batch (0 expected) and training-style micro-batches of one row; the settings come from the trajectory
    assert _max_diff_recompute(pipe, traj) <= 1e-5
    assert _max_diff_recompute(pipe, traj, micro_batch=1, sde_type=sde_type) <= 1e-5


def test_cps_legacy_logprob_is_tempered(pipe, tiny_sampling_config):
    cfg = tiny_sampling_config.evolve(
        seed=2, sde_type="cps", noise_level=0.8, sde_window_size=2, sde_window_range=[0, 3]
    )
    exact = pipe.generate_with_logprob(PROMPTS, cfg).trajectory
    legacy = pipe.generate_with_logprob(PROMPTS, cfg.evolve(cps_logprob="legacy")).trajectory
    torch.testing.assert_close(exact["latents"], legacy["latents"], rtol=0, atol=0)
    assert _max_diff_recompute(pipe, legacy) <= 1e-6  # "legacy" is read from the trajectory
    assert (legacy["log_probs"] - exact["log_probs"]).abs().max() > 1e-3


def test_logprob_gradient_reaches_transformer(model, request, tiny_sampling_config):
    from verl_omni.pipelines import QwenImagePipelineWithLogProb, StableDiffusion3PipelineWithLogProb

    cls = QwenImagePipelineWithLogProb if model == "qwen_image" else StableDiffusion3PipelineWithLogProb
    pipe = cls.from_pretrained(request.getfixturevalue(f"tiny_{model}_path"))
    pipe.set_progress_bar_config(disable=True)
    traj = pipe.generate_with_logprob(PROMPTS[:1], tiny_sampling_config.evolve(seed=3, n=1)).trajectory
    out = pipe.adapter.score_step(pipe.transformer, pipe.sde_scheduler, traj, 0)
    out.log_prob.sum().backward()
    grads = [p.grad for p in pipe.transformer.parameters() if p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)


def test_same_seed_is_bit_identical(pipe, tiny_sampling_config):
    cfg = tiny_sampling_config.evolve(seed=7, sde_window_size=2, sde_window_range=[0, 3])
    a = pipe.generate_with_logprob(PROMPTS, cfg)
    b = pipe.generate_with_logprob(PROMPTS, cfg)
    assert torch.equal(a.images, b.images)
    for key in list(a.trajectory.keys()):
        assert torch.equal(a.trajectory[key], b.trajectory[key]), key
    c = pipe.generate_with_logprob(PROMPTS, cfg.evolve(seed=8))
    assert not torch.equal(a.trajectory["latents"], c.trajectory["latents"])


def test_per_sample_generators_make_rows_independent(pipe, tiny_sampling_config):
    cfg = tiny_sampling_config.evolve(sde_window_size=0)
    full = pipe.generate_with_logprob(PROMPTS, cfg, make_generators(100, 4))
    alone = pipe.generate_with_logprob(PROMPTS[1:], cfg.evolve(n=1), [torch.Generator().manual_seed(103)])
    torch.testing.assert_close(alone.trajectory["latents"][0], full.trajectory["latents"][3], atol=1e-5, rtol=0)
    torch.testing.assert_close(alone.trajectory["log_probs"][0], full.trajectory["log_probs"][3], atol=1e-5, rtol=0)
    assert not torch.equal(full.trajectory["latents"][2], full.trajectory["latents"][3])


def test_noise_zero_matches_stock_pipeline(model, pipe, tiny_sampling_config):
    """At noise_level 0 the log-prob pipeline reproduces the stock diffusers __call__ bit for bit."""
    w = GUIDANCE[model]
    cfg = tiny_sampling_config.evolve(n=1, noise_level=0.0, guidance_scale=w)
    ours = pipe.generate_with_logprob(PROMPTS, cfg, make_generators(5, 2))
    traj = ours.trajectory
    kw = {"prompt_embeds": traj["prompt_embeds"], "negative_prompt_embeds": traj["negative_prompt_embeds"]}
    if model == "qwen_image":
        kw |= {"prompt_embeds_mask": traj["prompt_embeds_mask"], "true_cfg_scale": w,
               "negative_prompt_embeds_mask": traj["negative_prompt_embeds_mask"]}  # fmt: skip
        stock_call = QwenImagePipeline.__call__
    else:
        kw |= {"pooled_prompt_embeds": traj["pooled_prompt_embeds"], "guidance_scale": w,
               "negative_pooled_prompt_embeds": traj["negative_pooled_prompt_embeds"]}  # fmt: skip
        stock_call = StableDiffusion3Pipeline.__call__
    stock = stock_call(pipe, height=64, width=64, num_inference_steps=4, generator=make_generators(5, 2),
                       output_type="pt", **kw).images  # fmt: skip
    stock_u8 = (stock.float() * 255).round().clamp(0, 255).to(torch.uint8)
    assert torch.equal(ours.images, stock_u8)


def test_steps_outside_window_are_ode_steps_t11(pipe, tiny_sampling_config):
    cfg = tiny_sampling_config.evolve(n=1, noise_level=0.0)
    ode = pipe.generate_with_logprob(PROMPTS, cfg, make_generators(9, 2)).trajectory  # stores x_0 .. x_3
    sde = pipe.generate_with_logprob(
        PROMPTS, cfg.evolve(noise_level=0.9, sde_window_size=1, sde_window_range=[2, 3]), make_generators(9, 2)
    ).trajectory
    assert sde["step_indices"][0].tolist() == [2]
    assert torch.equal(sde["latents"][:, 0], ode["latents"][:, 2])  # before the window: ODE, bit for bit
    assert not torch.equal(sde["latents"][:, 1], ode["latents"][:, 3])  # the window step is stochastic


@pytest.mark.slow
def test_bf16_consistency_figure(model, request, tiny_sampling_config, record_property):
    """Report the bf16 rollout/training gaps: bf16 recompute (micro-batch 1) and fp32 recompute of a bf16 rollout."""
    from verl_omni.pipelines import QwenImagePipelineWithLogProb, StableDiffusion3PipelineWithLogProb

    cls = QwenImagePipelineWithLogProb if model == "qwen_image" else StableDiffusion3PipelineWithLogProb
    pipe = cls.from_pretrained(request.getfixturevalue(f"tiny_{model}_path"), dtype=torch.bfloat16)
    pipe.set_progress_bar_config(disable=True)
    cfg = tiny_sampling_config.evolve(
        seed=11, n=1, guidance_scale=GUIDANCE[model], sde_window_size=2, sde_window_range=[0, 3]
    )
    traj = pipe.generate_with_logprob(PROMPTS, cfg).trajectory
    micro = _max_diff_recompute(pipe, traj, micro_batch=1)
    fp32 = _max_diff_recompute(request.getfixturevalue(f"tiny_{model}_pipe"), traj)
    record_property("bf16_max_abs_diff_micro_batch_1", micro)
    record_property("bf16_rollout_vs_fp32_recompute_max_abs_diff", fp32)
    print(f"[{model}] bf16 |logp_rollout - logp_train| max: bf16 micro-batch 1 {micro:.3e}, fp32 trainer {fp32:.3e}")
    assert traj["latents"].dtype == torch.float32 and traj["log_probs"].dtype == torch.float32
    assert micro < 1e-3
    assert 0 < fp32 < 0.05  # bf16 forward vs fp32 forward: visible but small


# ---- bad input ---------------------------------------------------------------------------------------


def test_bad_prompts_and_generators(pipe, tiny_sampling_config):
    with pytest.raises(ValueError, match="prompts"):
        pipe.generate_with_logprob("a cat", tiny_sampling_config)
    with pytest.raises(ValueError, match="prompts"):
        pipe.generate_with_logprob([], tiny_sampling_config)
    with pytest.raises(ValueError, match="generator"):
        pipe.generate_with_logprob(PROMPTS, tiny_sampling_config, make_generators(0, 3))


def test_wrong_latent_shape_names_latents(pipe):
    adapter = pipe.adapter
    wrong = torch.zeros(2, 3, 7)
    with pytest.raises(ValueError, match="latents"):
        adapter.velocity(pipe.transformer, wrong, torch.ones(2), None, guidance_scale=1.0, height=64, width=64)


@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"noise_level": -0.5}, "noise_level"),
        ({"sde_type": "cps", "noise_level": 1.5}, "noise_level"),
        ({"sde_window_size": 2, "sde_window_range": [3, 12]}, "sde_window_range"),
        ({"sde_window_size": 5, "sde_window_range": [0, 4]}, "sde_window_size"),
        ({"sde_window_size": 10}, "sde_window_size"),
        ({"sde_type": "cps", "sde_window_size": 2, "sde_window_range": [8, 10]}, "sde_window_range"),
        ({"n": 0}, "n"),
        ({"sde_type": "ode"}, "sde_type"),
    ],
)
def test_sampling_config_rejects_bad_values(kwargs, key):
    with pytest.raises(ValueError, match=key):
        DiffusionSamplingConfig(num_inference_steps=10, **kwargs)


def test_per_row_windows(pipe, tiny_sampling_config):
    cfg = tiny_sampling_config.evolve(n=4, sde_window_size=1, sde_window_range=[0, 3], sde_window_per_row=True)
    traj = pipe.generate_with_logprob(PROMPTS, cfg, make_generators(21, 8)).trajectory
    starts = traj["step_indices"][:, 0]
    assert len(set(starts.tolist())) > 1 and set(starts.tolist()) <= {0, 1, 2}
    torch.testing.assert_close(traj["sigmas"], pipe.sde_scheduler.sigmas[traj["step_indices"]])
    assert _max_diff_recompute(pipe, traj) <= 1e-5
    assert _max_diff_recompute(pipe, traj, micro_batch=3) <= 1e-5
    # before its own window every row followed the ODE (T11 per row)
    ode = pipe.generate_with_logprob(PROMPTS, cfg.evolve(noise_level=0.0, sde_window_size=0, sde_window_range=None,
                                     sde_window_per_row=False), make_generators(21, 8)).trajectory  # fmt: skip
    for row, start in enumerate(starts.tolist()):
        assert torch.equal(traj["latents"][row, 0], ode["latents"][row, start])
    with pytest.raises(ValueError, match="sde_window_per_row"):
        pipe.generate_with_logprob(PROMPTS, cfg, torch.Generator().manual_seed(0))


def test_score_step_refuses_deterministic_steps_and_mixed_noise_levels(tiny_qwen_image_pipe, tiny_sampling_config):
    pipe = tiny_qwen_image_pipe
    cfg = tiny_sampling_config.evolve(seed=0, n=1, noise_level=0.0, sde_window_size=1, sde_window_range=[0, 3])
    ode = pipe.generate_with_logprob(PROMPTS, cfg).trajectory
    with pytest.raises(ValueError, match=r"noise_level: window step 0 of the trajectory is deterministic"):
        pipe.adapter.score_step(pipe.transformer, pipe.sde_scheduler, ode, 0)
    noisy = pipe.generate_with_logprob(PROMPTS, cfg.evolve(noise_level=0.7)).trajectory
    with pytest.raises(ValueError, match=r"trajectory\['noise_level'\]: rows differ"):
        pipe.adapter.score_step(pipe.transformer, pipe.sde_scheduler, torch.cat([ode, noisy]), 0)


def test_score_step_reads_sampler_settings_from_the_trajectory(tiny_qwen_image_pipe, tiny_sampling_config):
    pipe = tiny_qwen_image_pipe
    cfg = tiny_sampling_config.evolve(seed=4, n=1, sde_type="cps", sde_window_size=1, sde_window_range=[0, 3])
    cps = pipe.generate_with_logprob(PROMPTS, cfg).trajectory
    sched = pipe.sde_scheduler
    with torch.no_grad():
        default = pipe.adapter.score_step(pipe.transformer, sched, cps, 0)
        torch.testing.assert_close(default.log_prob, cps["log_probs"][:, 0], rtol=0, atol=0)
        # an explicit value that agrees with the stored one is accepted
        pipe.adapter.score_step(pipe.transformer, sched, cps, 0, sde_type="cps", noise_level=0.7)
    for field, value, stored in [
        ("sde_type", "sde", "'cps'"),
        ("cps_logprob", "legacy", "'exact'"),
        ("noise_level", 0.5, r"0\.69999"),
        ("guidance_scale", 4.0, r"1\.0"),
    ]:
        pattern = rf"{field}: the caller passed {value!r} but the trajectory was sampled with {stored}"
        with pytest.raises(ValueError, match=pattern):
            pipe.adapter.score_step(pipe.transformer, sched, cps, 0, **{field: value})
    with pytest.raises(KeyError, match=r"trajectory\['sde_type'\]: missing"):
        pipe.adapter.score_step(pipe.transformer, sched, cps.exclude("sde_type"), 0)
    sde = pipe.generate_with_logprob(PROMPTS, cfg.evolve(sde_type="sde")).trajectory
    with pytest.raises(ValueError, match=r"trajectory\['sde_type'\]: rows differ \(\[1, 1, 0, 0\]\)"):
        pipe.adapter.score_step(pipe.transformer, sched, torch.cat([cps, sde]), 0)


def test_without_log_probs_the_trajectory_holds_only_the_clean_latents_of_the_ode_sampler(pipe, tiny_sampling_config):
    """`calculate_log_probs=False` (DiffusionNFT's rollout): every step is Euler whatever `noise_level` says, and the
    trajectory holds the final latents, the timestep grid and the prompt embeddings — no window, no log-probs.

    Mutation run by hand: the sampler draws the SDE window without log-probs too (the `calculate_log_probs` branch
    of step 4 removed): FAILED for qwen_image and sd3 (the clean latents are no longer the ODE's)."""
    cfg = tiny_sampling_config.evolve(n=1, noise_level=0.0)
    ode = pipe.generate_with_logprob(PROMPTS, cfg, make_generators(9, 2)).trajectory  # stores x_0 .. x_3 (K = 3)
    clean = pipe.generate_with_logprob(
        PROMPTS, cfg.evolve(noise_level=0.9, calculate_log_probs=False), make_generators(9, 2)
    ).trajectory
    assert {"latents", "log_probs", "step_indices", "noise_level"}.isdisjoint(clean.keys())
    # the last window latent of the ODE trajectory is x_4 = the final latents of a 4-step ODE run, one step after x_3
    final = pipe.generate_with_logprob(
        PROMPTS, cfg.evolve(sde_window_size=1, sde_window_range=[3, 4]), make_generators(9, 2)
    ).trajectory
    assert torch.equal(clean["latents_clean"], final["latents"][:, 1])
    assert torch.equal(final["latents"][:, 0], ode["latents"][:, 3])
    assert clean["timesteps"].shape == (2, 4) and torch.equal(clean["timesteps"][:, :3], ode["timesteps"])
    assert torch.equal(clean["prompt_index"], torch.tensor([0, 1]))
    for key in ("prompt_embeds", "height", "num_inference_steps"):
        assert torch.equal(clean[key], ode[key]), key
