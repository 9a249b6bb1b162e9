"""`DiffusersFSDPEngine` with `actor.diffusion_loss.loss_mode=diffusion_nft` (one process, gloo, CPU, fp32, tiny
Qwen-Image, LoRA): the update on clean samples, the old policy (θ_old), what the rollout is served.

Mutations run by hand (each edited into the code, these tests run, then restored):

* `export_weights` without the old policy (`policy = contextlib.nullcontext()`): FAILED
  `test_update_leaves_the_old_policy_and_the_rollout_gets_it` (the export equals θ, not θ_old).
* `OldPolicy.refresh` copies whatever the decay (`self._old[name].copy_(p.detach())` only): FAILED
  `test_refresh_is_the_ema_of_the_old_and_the_new_policy`.
* `OldPolicy.active` does not put θ back (the `finally` restore removed): FAILED
  `test_update_leaves_the_old_policy_and_the_rollout_gets_it` (θ after the update equals θ_old).
"""

from __future__ import annotations

import pytest
import torch

from .conftest import sample_trajectory
from .test_fsdp_engine import _actor

NFT = {"loss_mode": "diffusion_nft", "mix_beta": 0.5}
LORA = {"lora_rank": 4, "lora_alpha": 8}


@pytest.fixture(scope="module")
def clean_batch(tiny_qwen_image_pipe):
    traj = sample_trajectory(tiny_qwen_image_pipe, calculate_log_probs=False)
    traj["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])
    traj["train_timesteps"] = traj["timesteps"]
    return traj


def _lora(engine):
    return {n: p.detach().full_tensor().clone() for n, p in engine.module.named_parameters() if p.requires_grad}


def _old(engine):
    return {n: t.full_tensor().clone() for n, t in engine.old_policy._old.items()}


def test_update_leaves_the_old_policy_and_the_rollout_gets_it(make_engine, clean_batch):
    engine = make_engine(actor=_actor(mini=4, micro=2, lr=1e-2, diffusion_loss=NFT), model=LORA)
    before = _lora(engine)
    assert all(torch.equal(before[n], t) for n, t in _old(engine).items())  # θ_old = θ at the start
    metrics = engine.update_policy(clean_batch)
    assert metrics["actor/nft_velocity_gap_max"] == 0.0  # one mini-batch: every forward saw θ = θ_old
    assert metrics["actor/nft_loss_pos"] == metrics["actor/nft_loss_neg"] and metrics["actor/grad_norm"] > 0
    after, old = _lora(engine), _old(engine)
    assert any(not torch.equal(after[n], before[n]) for n in after)  # θ moved
    assert all(torch.equal(old[n], before[n]) for n in old)  # θ_old did not
    exported = engine.export_weights()
    assert len(exported) == len(old)
    for value in exported.values():  # the rollout samples with θ_old (LoRA tensors keyed by peft names)
        assert any(v.shape == value.shape and torch.equal(v, value) for v in old.values())
    assert any(
        not any(v.shape == value.shape and torch.equal(v, value) for v in exported.values()) for value in after.values()
    )
    assert all(torch.equal(_lora(engine)[n], after[n]) for n in after)  # the export put θ back


def test_refresh_is_the_ema_of_the_old_and_the_new_policy(make_engine, clean_batch):
    engine = make_engine(actor=_actor(mini=4, micro=2, lr=1e-2, diffusion_loss=NFT), model=LORA)
    old0 = _old(engine)
    engine.update_policy(clean_batch)
    theta = _lora(engine)
    out = engine.refresh_old_policy(0.25)
    assert out["actor/old_policy_decay"] == 0.25 and out["actor/old_policy_gap_before"] > 0
    for name, value in _old(engine).items():
        torch.testing.assert_close(value, 0.25 * old0[name] + 0.75 * theta[name], atol=1e-7, rtol=0)
    engine.refresh_old_policy(0.0)
    assert all(torch.equal(v, theta[n]) for n, v in _old(engine).items())


def test_the_update_names_what_the_batch_lacks_and_flow_grpo_keeps_no_old_policy(make_engine, clean_batch):
    engine = make_engine(actor=_actor(mini=4, micro=2, diffusion_loss=NFT), model=LORA)
    with pytest.raises(ValueError, match=r"loss_mode='diffusion_nft' trains on clean samples; the batch lacks"):
        engine.update_policy(clean_batch.exclude("train_timesteps"))
    plain = make_engine(actor=_actor(mini=4, micro=2), model=LORA)
    assert plain.old_policy is None
    with pytest.raises(ValueError, match=r"refresh_old_policy: .*'flow_grpo' keeps no old policy"):
        plain.refresh_old_policy(0.0)
