"""`verl_omni.engine.velocity`: the σ ↔ timestep scale and the forward noising of the clean-sample and pair updates
agree with the scheduler's own forward process (`scale_noise`) on its timestep grid.

Mutation run by hand: `TIMESTEP_SCALE = 999.0`: FAILED here and in the DiffusionNFT / Diffusion-DPO engine tests'
velocity checks (see the ARCH-1 report).
"""

from __future__ import annotations

import torch

from verl_omni.engine.velocity import noised_latents, sigma_of, timestep_of
from verl_omni.schedulers import FlowMatchSDEDiscreteScheduler


def test_noised_latents_at_sigma_of_a_timestep_is_the_schedulers_forward_process():
    scheduler = FlowMatchSDEDiscreteScheduler(shift=3.0)
    scheduler.set_timesteps(6)
    rows = torch.tensor([0, 2, 5])
    timesteps, sigmas = scheduler.timesteps[rows], scheduler.sigmas[rows]
    torch.testing.assert_close(sigma_of(timesteps), sigmas.float())
    torch.testing.assert_close(timestep_of(sigmas), timesteps)
    gen = torch.Generator().manual_seed(0)
    x0, eps = torch.randn(3, 4, 8, generator=gen), torch.randn(3, 4, 8, generator=gen)
    torch.testing.assert_close(noised_latents(x0, eps, sigma_of(timesteps)), scheduler.scale_noise(x0, timesteps, eps))
