"""`verl_omni.engine.velocity`, the noising and velocity of the DiffusionNFT / Diffusion-DPO updates: the σ ↔ timestep
scale and the forward noising agree with the scheduler's forward process (`scale_noise`), and the unguided velocity at
`timestep_of(σ)` is the velocity the sampler stepped with (an Euler step at noise level 0).

Mutations run by hand: `TIMESTEP_SCALE = 999.0`: both tests FAILED; `unguided_velocity` handing the transformer
`timestep / TIMESTEP_SCALE`: the second FAILED. The engine's DiffusionNFT / DPO tests passed under both.
"""

from __future__ import annotations

import torch

from verl_omni.engine.velocity import noised_latents, sigma_of, timestep_of, unguided_velocity
from verl_omni.schedulers import FlowMatchSDEDiscreteScheduler

from .conftest import sample_trajectory


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


def test_unguided_velocity_at_timestep_of_sigma_is_the_samplers_euler_velocity(make_engine, tiny_qwen_image_pipe):
    traj = sample_trajectory(tiny_qwen_image_pipe, noise_level=0.0)
    engine = make_engine(actor={"fsdp_config": {"dtype": "float32", "forward_only": True}})
    micro = engine._to_device(traj)
    x, sigma, sigma_next = micro["latents"][:, 0], micro["sigmas"][:, 0], micro["sigmas_next"][:, 0]
    with torch.no_grad():
        v = unguided_velocity(engine, micro, x, timestep_of(sigma))
    euler = (micro["latents"][:, 1] - x) / (sigma_next - sigma).reshape(-1, *([1] * (x.dim() - 1)))
    torch.testing.assert_close(v, euler, rtol=1e-4, atol=1e-4)
