"""`StageFlops`' count of the update of every kind of loss, against torch's `FlopCounterMode` on the real update.

Each test runs `DiffusersFSDPEngine.update_policy` (one process, gloo, CPU, fp32, tiny Qwen-Image, no CFG) under
`FlopCounterMode` and SDPA's math backend (whose `Q·Kᵀ` and `A·V` are `bmm`s the counter sees), splitting what it
counts into the forwards and the backwards (the FLOPs counted inside each `Tensor.backward` call). The unit is one
row at one step, measured on the same engine: `_score` of one row (its forward, then its backward). The update's
forward FLOPs must be `StageFlops.update_forwards`' (no-grad + trained) forwards times the unit's, and its backward
FLOPs the trained forwards times the unit's backward, within 1 %: so the count holds for the old policy's and the
reference's no-grad forwards, the epochs, DiffusionNFT's trained timesteps, DPO's pairs (not the rollout's rows),
MixGRPO's window and DanceGRPO's subset. (LoRA's own matmuls are in the unit as in the update; the formula's
per-forward FLOPs are checked against the counter in tests/models/test_flops.py. On this 16-wide model the real
backward is about 1.6x the forward for full fine-tuning, below the formula's model-FLOPs 2x: the embedders and the
adaLN modulation see no input gradient; at 1.0 B and 1024 tokens those are well under 1 % of the FLOPs.)

Mutations run by hand (each edited into `StageFlops.update_forwards` in `verl_omni/trainer/flops.py`, this file and
tests/trainer/test_flops.py run, then restored):

* the old policy's forwards dropped (`no_grad = int(self.ref_forward)`): FAILED both
  `test_diffusion_nft_update_counts_old_reference_and_epochs` cases.
* the pair update counted on the rollout's rows (`terms = g["rows"]`): FAILED
  `test_dpo_pair_update_counts_reference_and_policy_on_the_pairs_only`.
* the clean update's epochs ignored (`return no_grad * terms, terms`): FAILED both DiffusionNFT cases.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from verl_omni.trainer.flops import StageFlops, batch_geometry

from .conftest import sample_trajectory
from .test_fsdp_engine import _actor

LORA = {"lora_rank": 4, "lora_alpha": 8}


def _counted(run) -> tuple[int, int]:
    """`(forward, backward)` FLOPs `FlopCounterMode` counts while `run()` runs."""
    real, backward = torch.Tensor.backward, [0]

    def counted_backward(self, *args, **kwargs):
        before = counter.get_total_flops()
        real(self, *args, **kwargs)
        backward[0] += counter.get_total_flops() - before

    with (
        FlopCounterMode(display=False) as counter,
        sdpa_kernel(SDPBackend.MATH),
        mock.patch.object(torch.Tensor, "backward", counted_backward),
    ):
        run()
    return counter.get_total_flops() - backward[0], backward[0]


def _unit(engine, traj) -> tuple[int, int]:
    """`(forward, backward)` FLOPs of one row at one step: `_score` of row 0, step 0, and its backward."""
    one = engine._to_device(traj[:1], update=True)
    return _counted(lambda: engine._score(one, 0).prev_sample_mean.sum().backward())


def _check(engine, path, batch, stage_kwargs, unit_traj, update_batch=None, ref_rows=0):
    """The update's counted (forward, backward) against `update_forwards`; `ref_rows` of the no-grad forwards are the
    reference's (LoRA adapters disabled: the unit without the adapters' matmuls). Returns `update_forwards`."""
    unit_fwd, unit_bwd = _unit(engine, unit_traj)
    ref_fwd = 0
    if ref_rows:
        with engine._reference_mode(), torch.no_grad():
            ref_fwd = _counted(lambda: engine._score(engine._to_device(unit_traj[:1], update=True), 0))[0]
    engine.optimizer.zero_grad(set_to_none=True)
    fwd, bwd = _counted(lambda: engine.update_policy(batch if update_batch is None else update_batch))
    stage = StageFlops.for_folder(path, **stage_kwargs)
    g = batch_geometry(batch, stage.model, stage.transformer_config, stage.vae_scale)
    no_grad, trained = stage.update_forwards(g, batch if update_batch is None else update_batch)
    assert trained > 0
    assert fwd == pytest.approx((no_grad - ref_rows + trained) * unit_fwd + ref_rows * ref_fwd, rel=0.01)
    assert bwd == pytest.approx(trained * unit_bwd, rel=0.01)
    return no_grad, trained


@pytest.fixture(scope="module")
def window_traj(tiny_qwen_image_pipe):
    """2 prompts x 2 images on a 4-step grid, log-probs on the K = 2 steps of the SDE window (MixGRPO's)."""
    traj = sample_trajectory(tiny_qwen_image_pipe)
    traj["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])
    return traj


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_mix_grpo_window_update_counts_only_the_window(make_engine, tiny_qwen_image_path, window_traj, lora):
    assert window_traj["log_probs"].shape == (4, 2) and int(window_traj["num_inference_steps"][0]) == 4
    engine = make_engine(actor=_actor(mini=2, micro=4), model=LORA if lora else None)
    # on-policy: no old log-probs, the update takes them from its own forwards
    assert _check(engine, tiny_qwen_image_path, window_traj, {"lora": lora}, window_traj) == (0, 8)  # 4 rows x K=2


def test_dance_grpo_step_subset_counts_only_the_trained_steps(make_engine, tiny_qwen_image_path, window_traj):
    batch = window_traj.clone()
    batch["train_step_mask"] = torch.tensor([[True, False], [False, True], [False, True], [True, False]])
    engine = make_engine(actor=_actor(mini=2, micro=4))
    assert _check(engine, tiny_qwen_image_path, batch, {"lora": False}, window_traj) == (0, 4)  # 4 of 8


@pytest.fixture(scope="module")
def clean_traj(tiny_qwen_image_pipe):
    traj = sample_trajectory(tiny_qwen_image_pipe, calculate_log_probs=False)
    traj["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])
    traj["train_timesteps"] = traj["timesteps"][:, :3]  # K' = 3 trained timesteps per row
    return traj


@pytest.mark.parametrize("ref_kl_coef", [0.0, 0.1], ids=["no-ref", "ref"])
def test_diffusion_nft_update_counts_old_reference_and_epochs(make_engine, tiny_qwen_image_path, window_traj,
                                                             clean_traj, ref_kl_coef):  # fmt: skip
    loss = {"loss_mode": "diffusion_nft", "mix_beta": 0.5, "ref_kl_coef": ref_kl_coef}
    engine = make_engine(actor=_actor(mini=4, micro=2, ppo_epochs=2, diffusion_loss=loss), model=LORA)
    kwargs = {"lora": True, "ppo_epochs": 2, "trains_on": "clean", "old_forward": True, "ref_forward": ref_kl_coef > 0}
    # 4 rows x 3 timesteps: the old policy's (+ the reference's) no-grad forwards, 2 epochs of trained ones
    want = (24 if ref_kl_coef else 12, 24)
    got = _check(engine, tiny_qwen_image_path, clean_traj, kwargs, window_traj, ref_rows=12 if ref_kl_coef else 0)
    assert got == want


def test_dpo_pair_update_counts_reference_and_policy_on_the_pairs_only(make_engine, tiny_qwen_image_path,
                                                                       window_traj, clean_traj):  # fmt: skip
    pairs = clean_traj.exclude("train_timesteps")
    pairs["dpo_noise"] = torch.randn((2, *pairs["latents_clean"].shape[1:])).repeat_interleave(2, dim=0)
    pairs["dpo_sigma"] = torch.tensor([0.7, 0.7, 0.3, 0.3])
    engine = make_engine(actor=_actor(mini=2, micro=2, diffusion_loss={"loss_mode": "dpo"}), model=LORA)
    rollout = torch.cat([pairs, pairs])  # the trainer's rollout batch: 8 rows; the update trained the 4 of `pairs`
    got = _check(engine, tiny_qwen_image_path, rollout, {"lora": True, "trains_on": "pairs"}, window_traj, pairs,
                 ref_rows=4)  # fmt: skip
    assert got == (4, 4)
