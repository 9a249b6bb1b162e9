"""LoRA + KL in bf16 mixed precision on the CPU: the reference pass (adapters disabled) and the updates around it.

The other CPU engine tests compute in fp32, where FSDP2 casts nothing. These run the default recipe's precision
(fp32 master weights, bf16 compute, fp32 gradient reduction) on a gloo world of one: FSDP2 fixes each parameter
group's reduce dtype from the parameters that require grad when it initialises, and a reference pass that switched
the adapters' `requires_grad` off as the first forward made the next backward fail ("attempting to assign a
gradient with dtype 'c10::BFloat16' to a tensor with grad_dtype 'Float'").
"""

from __future__ import annotations

import math

import pytest
import torch

from .conftest import sample_trajectory

LORA = {"lora_rank": 4, "lora_alpha": 8}


def _bf16_actor(**extra):
    return {
        "rollout_n": 2,
        "ppo_mini_batch_size": 2,
        "ppo_micro_batch_size_per_gpu": 4,
        "optim": {"lr": 5e-2, "weight_decay": 0.0},
        "fsdp_config": {"dtype": "bfloat16", **extra.pop("fsdp", {})},
        **extra,
    }


def _requires_grad(engine):
    return {n: p.requires_grad for n, p in engine.module.named_parameters()}


def _lora_weights(engine):
    return {n: p.detach().full_tensor().clone() for n, p in engine.module.named_parameters() if "lora_" in n}


@pytest.fixture(scope="module")
def trajectories(tiny_qwen_image_pipe, tiny_sd3_pipe):
    return {"qwen_image": sample_trajectory(tiny_qwen_image_pipe), "sd3": sample_trajectory(tiny_sd3_pipe)}


@pytest.mark.slow
@pytest.mark.parametrize("model", ["qwen_image", "sd3"])
def test_lora_kl_bf16_reference_update_reference_update(make_engine, tiny_pipeline_paths, trajectories, model):
    """ref log-prob -> update -> ref log-prob -> update, the reference pass being the engine's first forward."""
    traj = trajectories[model]
    path = tiny_pipeline_paths[model]
    engine = make_engine(path=path, model=LORA, actor=_bf16_actor(use_kl_loss=True, kl_loss_coef=0.04))
    flags = _requires_grad(engine)
    before = _lora_weights(engine)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])

    refs, kls = [], []
    for _ in range(2):
        ref = engine.compute_ref_log_prob(traj)
        assert _requires_grad(engine) == flags  # the reference pass leaves the trainable state as it found it
        refs.append(ref)
        batch = traj.clone()
        batch["old_log_probs"] = traj["log_probs"]  # the rollout's: no other forward before the update
        batch["advantages"] = advantages
        batch.update(ref.select("ref_prev_sample_mean"))
        metrics = engine.update_policy(batch)
        assert math.isfinite(metrics["actor/kl_loss"]) and metrics["actor/grad_norm"] > 0
        kls.append(metrics["actor/kl_loss"])
        grads = [p.grad for n, p in engine.module.named_parameters() if "lora_" in n and p.grad is not None]
        assert grads and all(g.dtype == torch.float32 for g in grads)  # reduced in fp32 into the fp32 shards

    assert kls[0] == 0.0 and kls[1] > 0.0  # lora_B starts at 0: policy == reference until the first step
    after = _lora_weights(engine)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    # the reference does not move with the adapter, and is exactly the model without LoRA
    for key in ("ref_log_probs", "ref_prev_sample_mean"):
        assert torch.equal(refs[1][key], refs[0][key]), key
    base = make_engine(path=path, actor=_bf16_actor(fsdp={"forward_only": True}))
    plain = base.compute_ref_log_prob(traj)
    for key in ("ref_log_probs", "ref_prev_sample_mean"):
        assert torch.equal(engine.compute_ref_log_prob(traj)[key], plain[key]), key


def test_lora_b_zero_policy_equals_reference_in_bf16(make_engine, trajectories):
    """Before any update (lora_B = 0) the adapter-enabled log-probs equal the reference ones, bit for bit."""
    traj = trajectories["qwen_image"]
    engine = make_engine(model=LORA, actor=_bf16_actor())
    ref = engine.compute_ref_log_prob(traj)["ref_log_probs"]
    assert torch.equal(engine.compute_log_prob(traj)["old_log_probs"], ref)


def test_engine_update_does_not_depend_on_the_first_forward(make_engine, trajectories):
    """FSDP2 initialises at construction: a first forward with the adapters frozen does not fix the reduce dtype.

    peft's own `disable_adapters()` sets `requires_grad=False` on the adapters (what the reference pass used to do);
    running the first forward like that and re-enabling them must leave the next bf16 update working.
    """
    traj = trajectories["qwen_image"]
    engine = make_engine(model=LORA, actor=_bf16_actor())
    engine.module.disable_adapters()
    assert not any(p.requires_grad for p in engine.module.parameters())
    engine.compute_log_prob(traj)
    engine.module.enable_adapters()
    batch = traj.clone()
    batch["old_log_probs"] = traj["log_probs"]
    batch["advantages"] = torch.tensor([1.0, -1.0, 0.5, -0.5])
    assert engine.update_policy(batch)["actor/grad_norm"] > 0
