"""Tests for `verl_omni.engine.DiffusersFSDPEngine` on one process (gloo, CPU, fp32) with tiny pipelines."""

from __future__ import annotations

import re

import pytest
import torch

from verl_omni.engine import LoRABindingError

from .conftest import sample_trajectory


def _with_update_keys(traj, old_log_probs, seed=0):
    batch = traj.clone()
    batch["old_log_probs"] = old_log_probs
    gen = torch.Generator().manual_seed(seed)
    batch["advantages"] = torch.randn(batch.batch_size[0], generator=gen)
    return batch


def _actor(mini=2, micro=2, lr=1e-3, optim=None, fsdp=None, **extra):
    """Actor config dict: groups of 2 images, fp32 compute, AdamW without weight decay unless overridden."""
    return {
        "rollout_n": 2,
        "ppo_mini_batch_size": mini,
        "ppo_micro_batch_size_per_gpu": micro,
        "optim": {"lr": lr, "weight_decay": 0.0, **(optim or {})},
        "fsdp_config": {"dtype": "float32", **(fsdp or {})},
        **extra,
    }


def _params(engine):
    return {n: p.detach().full_tensor().clone() for n, p in engine.module.named_parameters()}


def _changed(before, after):
    """Names of the parameters whose values differ between two `_params` snapshots."""
    return {n for n in before if not torch.equal(before[n], after[n])}


def assert_resume_is_bit_identical(make_engine, path, trajectory, ckpt, model):
    """Two updates straight == one update, save, load into a fresh engine, one more: metrics, weights, AdamW state
    (the LR schedule warms up over both steps, so a lost scheduler state changes the second update)."""
    actor = _actor(mini=1, optim={"lr_warmup_steps": 2, "lr_scheduler_type": "cosine", "total_training_steps": 4})

    def train(engine, seed):
        return engine.update_policy(_with_update_keys(trajectory, trajectory["log_probs"], seed=seed))

    straight = make_engine(path=path, actor=actor, model=model)
    train(straight, 0)
    want_metrics = train(straight, 1)
    first = make_engine(path=path, actor=actor, model=model)
    train(first, 0)
    first.save_checkpoint(ckpt)
    del first
    resumed = make_engine(path=path, actor=actor, model=model)
    assert resumed.load_checkpoint(ckpt) == 2
    assert train(resumed, 1) == want_metrics
    got, want = _params(resumed), _params(straight)
    assert got.keys() == want.keys() and not _changed(want, got)
    got_opt, want_opt = resumed.optimizer.state_dict()["state"], straight.optimizer.state_dict()["state"]
    for key, state in want_opt.items():
        for field, value in state.items():
            value = value.full_tensor() if hasattr(value, "full_tensor") else value
            other = got_opt[key][field]
            other = other.full_tensor() if hasattr(other, "full_tensor") else other
            assert torch.equal(torch.as_tensor(other), torch.as_tensor(value)), (key, field)


def _grads(engine):
    return {n: p.grad.full_tensor().clone() for n, p in engine.module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize(
    ("pipe_fixture", "guidance_scale"),
    [
        pytest.param("tiny_qwen_image_pipe", 1.0, id="qwen"),
        pytest.param("tiny_qwen_image_pipe", 4.0, id="qwen-true-cfg"),
        pytest.param("tiny_sd3_pipe", 4.5, id="sd3-cfg"),
        pytest.param("tiny_flux_pipe", 3.5, id="flux-guidance-embedding"),
    ],
)
def test_engine_log_probs_match_sampler_and_first_update_is_on_policy(
    request, make_engine, pipe_fixture, guidance_scale
):
    pipe = request.getfixturevalue(pipe_fixture)
    traj = sample_trajectory(pipe, guidance_scale=guidance_scale)
    path = request.getfixturevalue(pipe_fixture.replace("_pipe", "_path"))
    engine = make_engine(path=path, actor=_actor())
    old = engine.compute_log_prob(traj)["old_log_probs"]
    assert old.shape == traj["log_probs"].shape and old.dtype == torch.float32
    assert (old - traj["log_probs"]).abs().max().item() < 1e-5
    # the sampler's log-probs as the behaviour policy: the first update must see ratio 1
    metrics = engine.update_policy(_with_update_keys(traj, traj["log_probs"]))
    assert abs(metrics["actor/ratio_mean"] - 1.0) < 1e-6
    assert abs(metrics["actor/ppo_kl"]) < 1e-6
    assert metrics["actor/pg_clipfrac"] == 0.0
    assert metrics["actor/rollout_logprob_diff_max"] < 1e-5
    assert metrics["actor/grad_norm"] > 0


def test_engine_loss_is_mean_over_micro_batches_and_steps(make_engine, qwen_trajectory):
    """One micro-batch of 4 and four of 1 give the same update (loss scaled by micro/mini/K)."""
    results = []
    for micro in (4, 1):
        # eps 1e-6: Adam's first step is ~lr·g/|g|, which amplifies fp32 summation-order noise of tiny gradients
        engine = make_engine(actor=_actor(micro=micro, optim={"eps": 1e-6}))
        old = engine.compute_log_prob(qwen_trajectory)["old_log_probs"]
        metrics = engine.update_policy(_with_update_keys(qwen_trajectory, old))
        results.append((metrics, _params(engine), _grads(engine)))
    (m4, p4, g4), (m1, p1, g1) = results
    assert m4["actor/pg_loss"] == pytest.approx(m1["actor/pg_loss"], rel=1e-6)
    assert m4["actor/grad_norm"] == pytest.approx(m1["actor/grad_norm"], rel=1e-5)
    for name in g4:
        torch.testing.assert_close(g4[name], g1[name], atol=1e-8, rtol=1e-4, msg=name)
    for name in p4:
        torch.testing.assert_close(p4[name], p1[name], atol=1e-6, rtol=0, msg=name)


def test_engine_full_finetune_changes_every_block_and_lr_schedule(make_engine, qwen_trajectory):
    engine = make_engine(actor=_actor(mini=1, optim={"lr_warmup_steps": 4}))
    assert engine.num_lora_modules == 0 and engine.num_sharded_blocks == 2
    before = _params(engine)
    old = engine.compute_log_prob(qwen_trajectory)["old_log_probs"]
    metrics = engine.update_policy(_with_update_keys(qwen_trajectory, old))
    assert engine.global_step == 2  # two mini-batches of 2 images
    assert metrics["actor/lr"] == pytest.approx(1e-3 * 2 / 4)  # the 2nd step of a 4-step linear warm-up
    after = _params(engine)
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert any(n.startswith("transformer_blocks.0.") for n in changed)
    assert any(n.startswith("transformer_blocks.1.") for n in changed)


def test_engine_lora_binds_modules_and_trains_only_lora(make_engine, qwen_trajectory):
    engine = make_engine(model={"lora_rank": 4, "lora_alpha": 8})
    assert engine.num_lora_modules > 0
    trainable = [n for n, p in engine.module.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    before = _params(engine)
    old = engine.compute_log_prob(qwen_trajectory)["old_log_probs"]
    engine.update_policy(_with_update_keys(qwen_trajectory, old))
    after = _params(engine)
    changed = {n for n in before if not torch.equal(before[n], after[n])}
    assert changed and all("lora_" in n for n in changed)


@pytest.mark.parametrize(
    "model",
    [
        pytest.param({"target_modules": ["not_a_layer"]}, id="unknown target"),
        pytest.param({"target_modules": ["to_q", "to_k"], "exclude_modules": ["to_q", "to_k"]}, id="all excluded"),
    ],
)
def test_engine_lora_binding_nothing_is_an_error_listing_module_names(make_engine, model):
    target = re.escape(repr(model["target_modules"]))
    with pytest.raises(
        LoRABindingError,
        match=rf"target_modules={target}.*bound no module.*linear module names are: .*to_k, to_out\.0, to_q",
    ):
        make_engine(model={"lora_rank": 4, **model})


def test_engine_reference_disables_lora_and_kl_loss(make_engine, qwen_trajectory):
    actor = _actor(micro=4, lr=5e-2, use_kl_loss=True, kl_loss_coef=0.04)
    engine = make_engine(model={"lora_rank": 4, "lora_alpha": 8}, actor=actor)
    base = make_engine(actor=_actor(fsdp={"forward_only": True}))
    ref = base.compute_ref_log_prob(qwen_trajectory)
    assert ref["ref_prev_sample_mean"].shape == (4, 2, *qwen_trajectory["latents"].shape[2:])
    batch = _with_update_keys(qwen_trajectory, engine.compute_log_prob(qwen_trajectory)["old_log_probs"])
    batch.update(ref.select("ref_prev_sample_mean"))
    first = engine.update_policy(batch)
    assert first["actor/kl_loss"] < 1e-12  # lora_B starts at zero: policy == reference
    second = engine.update_policy(batch)
    assert second["actor/kl_loss"] > 0.0
    # adapters disabled == the base model, exactly; enabled differs after training
    torch.testing.assert_close(engine.compute_ref_log_prob(qwen_trajectory)["ref_log_probs"], ref["ref_log_probs"])
    assert not torch.equal(engine.compute_log_prob(qwen_trajectory)["old_log_probs"], ref["ref_log_probs"])


def test_engine_full_finetune_has_no_reference_in_place(make_engine, qwen_trajectory):
    engine = make_engine()
    with pytest.raises(ValueError, match=r"build a second engine with actor\.fsdp_config\.forward_only=true"):
        engine.compute_ref_log_prob(qwen_trajectory)


def test_engine_export_lora_and_full_weights(make_engine, tiny_qwen_image_path):
    from diffusers import AutoModel

    lora = make_engine(model={"lora_rank": 4, "lora_alpha": 8})
    tensors = lora.export_weights(dtype=torch.bfloat16)
    assert len(tensors) == 2 * lora.num_lora_modules
    assert all(".default." not in k and (".lora_A." in k or ".lora_B." in k) for k in tensors)
    assert all(t.dtype == torch.bfloat16 and t.device.type == "cpu" for t in tensors.values())
    a = tensors["transformer_blocks.0.attn.to_q.lora_A.weight"]
    assert a.shape == (4, lora.module.transformer_blocks[0].attn.to_q.in_features)

    full = make_engine().export_weights()
    plain = AutoModel.from_pretrained(str(tiny_qwen_image_path), subfolder="transformer").state_dict()
    assert set(full) == set(plain)
    for name, value in plain.items():
        assert torch.equal(full[name], value), name


def _optimizer_state(engine):
    """AdamW state per parameter name (full tensors), and the param groups' hyper-parameters."""
    names = {id(p): n for n, p in engine.module.named_parameters()}
    state = {}
    for param, values in engine.optimizer.state.items():
        for key, value in values.items():
            full = value.full_tensor() if hasattr(value, "full_tensor") else value
            state[f"{names[id(param)]}.{key}"] = torch.as_tensor(full).detach().clone()
    groups = [{k: v for k, v in g.items() if k != "params"} for g in engine.optimizer.param_groups]
    return state, groups


@pytest.mark.slow
def test_engine_checkpoint_resume_is_bit_identical_to_training_straight(make_engine, qwen_trajectory, tmp_path):
    """N updates straight == N - k updates, save, load into a fresh engine, k more: weights, AdamW state, LR.

    Each update is 2 optimizer steps (mini-batches of 1 prompt) on a warm-up + cosine schedule, so the LR differs
    at every step and the first steps after resuming need the restored scheduler (the optimizer's saved LR only
    covers the first). Each update's advantages are drawn from torch's global RNG, as a trainer's window or
    timestep choice would be, so resuming needs the restored RNG (the fresh engine reseeds it to build LoRA).
    """
    actor = _actor(
        mini=1,
        shuffle=True,
        optim={"lr_warmup_steps": 2, "lr_scheduler_type": "cosine", "total_training_steps": 8, "min_lr_ratio": 0.1},
    )
    model = {"lora_rank": 4, "lora_alpha": 8}
    old = qwen_trajectory["log_probs"]

    def train(engine, updates):
        metrics = []
        for _ in range(updates):
            batch = qwen_trajectory.clone()
            batch["old_log_probs"] = old
            batch["advantages"] = torch.randn(batch.batch_size[0])  # the global RNG, as a trainer's draws
            metrics.append(engine.update_policy(batch))
        return metrics

    n, k = 2, 1
    straight = make_engine(actor=actor, model=model)
    expected_metrics = train(straight, n)[n - k :]

    first = make_engine(actor=actor, model=model)
    train(first, n - k)
    first.save_checkpoint(tmp_path / "ckpt")
    del first
    torch.manual_seed(1234)  # whatever happened in between, the checkpoint restores the RNG
    resumed = make_engine(actor=actor, model=model)
    assert resumed.load_checkpoint(tmp_path / "ckpt") == 2 * (n - k)
    lr_at_resume = resumed.optimizer.param_groups[0]["lr"]
    metrics = train(resumed, k)

    assert resumed.global_step == straight.global_step == 2 * n
    assert metrics[-1]["actor/lr"] != lr_at_resume  # the schedule moved after resuming
    assert metrics == expected_metrics
    assert resumed.lr_scheduler.state_dict() == straight.lr_scheduler.state_dict()
    got, want = _params(resumed), _params(straight)
    for name in want:
        assert torch.equal(got[name], want[name]), name
    (got_state, got_groups), (want_state, want_groups) = _optimizer_state(resumed), _optimizer_state(straight)
    assert got_groups == want_groups
    assert want_state and want_state.keys() <= got_state.keys()
    for name in want_state:
        assert torch.equal(got_state[name], want_state[name]), name
    # loading initialises AdamW state for the params that never get a gradient (the last block's unused text
    # branch): zero moments, which AdamW never reads, as it skips params without a gradient
    for name in got_state.keys() - want_state.keys():
        assert name.endswith(".step") or not got_state[name].any(), name


@pytest.mark.parametrize(
    ("actor", "pattern"),
    [
        ({"fsdp_config": {"param_offload": True}}, r"CPU offload needs a CUDA device"),
        ({"fsdp_config": {"fsdp_size": 3}}, r"fsdp_size: expected -1 or the world size 1, got 3"),
    ],
)
def test_engine_rejects_bad_engine_config(make_engine, actor, pattern):
    with pytest.raises(ValueError, match=pattern):
        make_engine(actor=actor)


def test_engine_rejects_unknown_block_prefix(make_engine):
    with pytest.raises(ValueError, match=r"'blocks\.' names no submodule.*children are: .*transformer_blocks"):
        make_engine(model={"fsdp_layer_prefixes": ["blocks."]})


def test_engine_update_rejects_missing_keys_and_forward_only(make_engine, qwen_trajectory):
    engine = make_engine(actor=_actor(use_kl_loss=True))
    batch = _with_update_keys(qwen_trajectory, qwen_trajectory["log_probs"])
    with pytest.raises(ValueError, match=r"batch lacks \['ref_prev_sample_mean'\]"):
        engine.update_policy(batch)
    frozen = make_engine(actor=_actor(fsdp={"forward_only": True}))
    with pytest.raises(ValueError, match=r"forward_only=true"):
        frozen.update_policy(batch)


def test_engine_update_without_a_group_size_names_rollout_n(make_engine, qwen_trajectory):
    engine = make_engine(actor={"rollout_n": None})  # a standalone actor config: the trainer would fill it
    with pytest.raises(ValueError, match=r"actor\.rollout_n: null.*DiffusionActorConfig\(rollout_n="):
        engine.update_policy(_with_update_keys(qwen_trajectory, qwen_trajectory["log_probs"]))


def test_engine_gradient_checkpointing_gives_the_same_update(make_engine, qwen_trajectory):
    grads = []
    for checkpointing in (False, True):
        engine = make_engine(model={"enable_gradient_checkpointing": checkpointing})
        assert engine.module.is_gradient_checkpointing == checkpointing
        batch = _with_update_keys(qwen_trajectory, engine.compute_log_prob(qwen_trajectory)["old_log_probs"])
        engine.update_policy(batch)
        grads.append(_grads(engine))
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-9, rtol=1e-6, msg=name)


def test_engine_checkpoint_load_errors(make_engine, tmp_path):
    engine = make_engine()
    with pytest.raises(FileNotFoundError, match=r"not an engine checkpoint \(no meta\.json\)"):
        engine.load_checkpoint(tmp_path)
    engine.save_checkpoint(tmp_path / "full")
    lora = make_engine(model={"lora_rank": 4, "lora_alpha": 8})
    with pytest.raises(ValueError, match=r"does not match the engine's trainable weights"):
        lora.load_checkpoint(tmp_path / "full")


def test_engine_takes_its_loss_from_the_registry(make_engine, qwen_trajectory, monkeypatch):
    """A loss registered under a new `loss_mode` runs in `update_policy` without any engine change."""
    from verl_omni.algos import PolicyLossOutput, flow_grpo_loss, register_loss, registry

    monkeypatch.setattr(registry, "_LOSSES", registry._LOSSES.copy())
    calls = []

    @register_loss("counted_flow_grpo")
    def counted(inputs, config):
        calls.append(tuple(inputs.log_prob.shape))
        out = flow_grpo_loss(inputs, config)
        return PolicyLossOutput(out.loss, out.pg_loss, out.kl, {"calls_max": torch.tensor(float(len(calls)))})

    engine = make_engine(actor=_actor(diffusion_loss={"loss_mode": "counted_flow_grpo"}))
    metrics = engine.update_policy(_with_update_keys(qwen_trajectory, qwen_trajectory["log_probs"]))
    assert calls == [(2,)] * 4  # 2 micro-batches of 2 images x K = 2 window steps
    assert metrics["actor/calls_max"] == 4.0 and "actor/pg_clipfrac" not in metrics


def test_engine_scores_a_cps_trajectory_with_the_settings_it_stores(make_engine, tiny_qwen_image_pipe):
    """sde_type / cps_logprob come from the trajectory (their one source), so fp32 recompute == rollout, exactly.

    One micro-batch of the whole batch, as the rollout ran it (Qwen-Image trims prompt padding per micro-batch,
    which moves the last bits); scoring it as sde instead would differ by about 0.05.
    """
    cps = sample_trajectory(tiny_qwen_image_pipe, sde_type="cps", seed=5)
    engine = make_engine(actor=_actor(micro=4))
    old = engine.compute_log_prob(cps)["old_log_probs"]
    torch.testing.assert_close(old, cps["log_probs"], rtol=0, atol=0)
    with pytest.raises(TypeError, match="sde_type"):  # one source: the trajectory, not a second engine argument
        make_engine(sde_type="sde")
