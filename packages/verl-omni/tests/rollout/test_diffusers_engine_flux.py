"""The embedded diffusers rollout engine on the tiny FLUX: compiled double- and single-stream blocks."""

import pytest
import torch

from verl_omni.pipelines import make_generators
from verl_omni.rollout import DiffusersRolloutEngine

PROMPTS = ["a cat on a red chair"]


@pytest.mark.slow  # about 100 s on 2 cores: inductor compiles 4 blocks
def test_compiled_flux_blocks_sample_what_the_eager_engine_samples(tiny_flux_path, tiny_sampling_config):
    """FLUX lists both block classes in `_repeated_blocks`: all 2 + 2 are compiled, the samples do not change."""
    sampling = tiny_sampling_config.evolve(
        n=1, num_inference_steps=2, sde_window_size=1, sde_window_range=[0, 2], guidance_scale=3.5
    )
    compiled = DiffusersRolloutEngine(tiny_flux_path, sampling=sampling, compile_blocks=True)
    eager = DiffusersRolloutEngine(tiny_flux_path, sampling=sampling)
    transformer = compiled.transformer
    blocks = [*transformer.transformer_blocks, *transformer.single_transformer_blocks]
    assert compiled.compiled_blocks == len(blocks) == 4
    assert all(getattr(b, "_compiled_call_impl", None) is not None for b in blocks)
    got = compiled.generate(PROMPTS, generator=make_generators(0, 1))
    want = eager.generate(PROMPTS, generator=make_generators(0, 1))
    for key in ("latents", "log_probs"):
        torch.testing.assert_close(got[key], want[key], atol=1e-4, rtol=1e-4)
    assert got["guidance_scale"].tolist() == [3.5]
