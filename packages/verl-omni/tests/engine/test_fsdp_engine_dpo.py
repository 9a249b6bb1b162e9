"""`DiffusersFSDPEngine` with `actor.diffusion_loss.loss_mode=dpo` (one process, gloo, CPU, fp32, tiny Qwen-Image,
LoRA): the update on (chosen, rejected) pairs against the adapter-disabled reference (`verl_omni.engine.pair_update`).

Mutations run by hand (each edited into `verl_omni/engine/pair_update.py`, these tests run, then restored):

* the reference computed under the current policy (`with contextlib.nullcontext():` for
  `with engine._reference_mode():`): FAILED
  `test_the_reference_is_the_base_model_and_stays_fixed_while_the_policy_moves` (the second update's reference error
  2.1604 ≠ the first's 2.2542: the "reference" moved with the policy).
"""

from __future__ import annotations

import math

import pytest
import torch

from .conftest import sample_trajectory
from .test_fsdp_engine import _actor

DPO = {"loss_mode": "dpo", "dpo_beta": 100.0}
LORA = {"lora_rank": 4, "lora_alpha": 8}


@pytest.fixture(scope="module")
def pair_batch(tiny_qwen_image_pipe):
    """2 prompts x 2 images, rows (0, 1) and (2, 3) as pairs, one ε and one σ per pair."""
    traj = sample_trajectory(tiny_qwen_image_pipe, calculate_log_probs=False)
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn((2, *traj["latents_clean"].shape[1:]), generator=gen)
    traj["dpo_noise"] = noise.repeat_interleave(2, dim=0)
    traj["dpo_sigma"] = torch.tensor([0.7, 0.7, 0.3, 0.3])
    return traj


def _lora(engine):
    return {n: p.detach().full_tensor().clone() for n, p in engine.module.named_parameters() if p.requires_grad}


def test_the_reference_is_the_base_model_and_stays_fixed_while_the_policy_moves(make_engine, pair_batch):
    engine = make_engine(actor=_actor(mini=2, micro=2, lr=1e-2, diffusion_loss=DPO), model=LORA)
    before = _lora(engine)
    first = engine.update_policy(pair_batch)
    # policy = reference at the start (LoRA B = 0): z = 0, loss log 2, margin 0
    assert first["actor/dpo_reward_margin_max"] == 0.0 and first["actor/pg_loss"] == pytest.approx(math.log(2))
    assert first["actor/dpo_model_error_chosen"] == first["actor/dpo_ref_error_chosen"] and first["actor/grad_norm"] > 0
    assert any(not torch.equal(v, before[n]) for n, v in _lora(engine).items())
    second = engine.update_policy(pair_batch)
    assert second["actor/dpo_ref_error_chosen"] == first["actor/dpo_ref_error_chosen"]  # the base did not move
    assert second["actor/dpo_reward_margin_max"] > 0  # the policy did
    assert second["actor/dpo_model_error_chosen"] != second["actor/dpo_ref_error_chosen"]


def test_batches_that_break_pairs_are_refused(make_engine, pair_batch):
    engine = make_engine(actor=_actor(mini=2, micro=2, diffusion_loss=DPO), model=LORA)
    with pytest.raises(
        ValueError, match=r"loss_mode='dpo' trains on preference pairs; the batch lacks \['dpo_noise'\]"
    ):
        engine.update_policy(pair_batch.exclude("dpo_noise"))
    with pytest.raises(ValueError, match="must split into mini-batches of an even"):
        engine.update_policy(pair_batch[:3])
    shifted = pair_batch[[1, 2, 3, 0]]  # rows 2i, 2i+1 no longer share ε and σ
    with pytest.raises(ValueError, match="same noise and noise level"):
        engine.update_policy(shifted)
