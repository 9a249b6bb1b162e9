"""MixGRPO-Flash (`dpm_algorithm_type`) in the one sampling loop, on the tiny Qwen-Image: the window is untouched,
the ODE after it takes fewer, higher-order steps."""

from __future__ import annotations

import pytest
import torch

PROMPTS = ["a cat on a red chair"]


def _run(pipe, cfg, monkeypatch):
    """One call; returns its output and how many transformer forwards (`adapter.velocity` calls) it made."""
    adapter, calls = pipe.adapter, []
    inner = type(adapter).velocity
    monkeypatch.setattr(adapter, "velocity", lambda *a, **k: calls.append(1) or inner(adapter, *a, **k))
    out = pipe.generate_with_logprob(PROMPTS, cfg)
    monkeypatch.undo()
    return out, len(calls)


def test_flash_keeps_the_window_and_compresses_the_ode_after_it(
    tiny_qwen_image_pipe, tiny_sampling_config, monkeypatch
):
    """6 steps, a 2-step window pinned at the start (range [0, 2]): the window's latents, log-probs and timesteps
    are bit-identical with and without Flash (nothing before it differs); `post` runs the 4 steps after it as
    round(4 x 0.4) = 2 DPM-Solver++ steps (4 forwards instead of 6) and changes the image; `all` keeps 6 forwards.

    Mutation run by hand: the post-window loop skipped (`post_from < steps` branch removed): FAILED (the image is the
    window's end, not a clean sample: forwards 2)."""
    cfg = tiny_sampling_config.evolve(
        seed=5, num_inference_steps=6, sde_window_size=2, sde_window_range=[0, 2], noise_level=1.0, height=32, width=32
    )
    euler, n_euler = _run(tiny_qwen_image_pipe, cfg, monkeypatch)
    post, n_post = _run(tiny_qwen_image_pipe, cfg.evolve(dpm_algorithm_type="dpmsolver++"), monkeypatch)
    every, n_all = _run(
        tiny_qwen_image_pipe, cfg.evolve(dpm_algorithm_type="dpmsolver++", dpm_apply_strategy="all"), monkeypatch
    )
    assert (n_euler, n_post, n_all) == (6, 4, 6)
    for out in (post, every):
        for key in ("latents", "log_probs", "timesteps", "sigmas", "sigmas_next"):
            assert torch.equal(out.trajectory[key], euler.trajectory[key]), key
        assert not torch.equal(out.images, euler.images)


def test_flash_is_refused_where_there_is_no_single_window(tiny_sampling_config):
    from verl_core.config.errors import ConfigValueError

    with pytest.raises(ConfigValueError, match=r"dpm_algorithm_type.*calculate_log_probs=false"):
        tiny_sampling_config.evolve(dpm_algorithm_type="dpmsolver++", calculate_log_probs=False)
    with pytest.raises(ConfigValueError, match="dpm_post_compress_ratio"):
        tiny_sampling_config.evolve(dpm_algorithm_type="dpmsolver++", dpm_post_compress_ratio=1.5)
