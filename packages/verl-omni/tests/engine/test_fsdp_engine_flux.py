"""`DiffusersFSDPEngine` on the tiny guidance-distilled FLUX (one process, gloo, CPU, fp32): both block lists
sharded by default, full and LoRA updates, bit-identical resume, and every registered loss mode."""

from __future__ import annotations

import pytest
import torch

from verl_omni.algos import loss_spec, registered_losses

from .conftest import sample_trajectory
from .test_fsdp_engine import _actor, _changed, _params, _with_update_keys, assert_resume_is_bit_identical

GUIDANCE = 3.5


@pytest.fixture(scope="module")
def flux_trajectory(tiny_flux_pipe):
    return sample_trajectory(tiny_flux_pipe, guidance_scale=GUIDANCE)


def test_flux_full_update_shards_and_trains_double_and_single_blocks(make_engine, tiny_flux_path, flux_trajectory):
    engine = make_engine(path=tiny_flux_path, actor=_actor(mini=1), model={})
    assert engine.num_lora_modules == 0 and engine.num_sharded_blocks == 4
    before = _params(engine)
    engine.update_policy(_with_update_keys(flux_trajectory, flux_trajectory["log_probs"]))
    changed = _changed(before, _params(engine))
    for prefix in ("transformer_blocks.1.", "single_transformer_blocks.1.", "time_text_embed.guidance_embedder."):
        assert any(n.startswith(prefix) for n in changed), prefix


def test_flux_lora_update_trains_only_lora_in_both_block_lists(make_engine, tiny_flux_path, flux_trajectory):
    engine = make_engine(path=tiny_flux_path, model={"lora_rank": 4, "lora_alpha": 8})
    before = _params(engine)
    metrics = engine.update_policy(_with_update_keys(flux_trajectory, flux_trajectory["log_probs"]))
    assert abs(metrics["actor/ratio_mean"] - 1.0) < 1e-6  # lora_B = 0: the base model that sampled
    changed = _changed(before, _params(engine))
    assert changed and all("lora_" in n for n in changed)
    assert any(n.startswith("single_transformer_blocks.") for n in changed)


@pytest.mark.parametrize("model", [{"lora_rank": 4, "lora_alpha": 8}, {}], ids=["lora", "full"])
def test_flux_checkpoint_resume_is_bit_identical(make_engine, tiny_flux_path, flux_trajectory, tmp_path, model):
    assert_resume_is_bit_identical(make_engine, tiny_flux_path, flux_trajectory, tmp_path / "ckpt", model)


@pytest.mark.parametrize("loss_mode", registered_losses())
def test_flux_every_registered_loss_mode_updates_the_weights(make_engine, tiny_flux_path, tiny_flux_pipe, loss_mode):
    spec = loss_spec(loss_mode)
    actor = _actor(mini=2, micro=2, diffusion_loss={"loss_mode": loss_mode})
    engine = make_engine(path=tiny_flux_path, actor=actor, model={"lora_rank": 4, "lora_alpha": 8})
    if spec.trains_on == "transitions":
        traj = sample_trajectory(tiny_flux_pipe, guidance_scale=GUIDANCE)
    else:
        traj = sample_trajectory(tiny_flux_pipe, guidance_scale=GUIDANCE, calculate_log_probs=False)
        traj["train_timesteps"] = traj["timesteps"][:, :2]
    traj = traj[:2]  # one prompt's group: on-policy needs the local batch to be one mini-batch
    traj["advantages"] = torch.tensor([1.0, -1.0])
    if spec.trains_on == "pairs":  # row 0 chosen, row 1 rejected, sharing ε and σ
        noise = torch.randn(traj["latents_clean"][:1].shape, generator=torch.Generator().manual_seed(0))
        traj["dpo_noise"], traj["dpo_sigma"] = noise.expand(2, *noise.shape[1:]).clone(), torch.tensor([0.6, 0.6])
    before = _params(engine)
    metrics = engine.update_policy(traj)
    assert torch.isfinite(torch.tensor(metrics["actor/pg_loss"])) and metrics["actor/grad_norm"] > 0, metrics
    assert _changed(before, _params(engine))


def test_flux_default_shards_both_block_lists_and_double_only_warns(make_engine, tiny_flux_path, caplog):
    """No `fsdp_layer_prefixes`: `FluxAdapter`'s default shards the double- and single-stream blocks, no warning; an
    explicit `[transformer_blocks.]` wins and the warning names the single-stream blocks left in the root unit."""
    with caplog.at_level("WARNING", logger="verl_omni.engine.sharding"):
        engine = make_engine(path=tiny_flux_path)
    assert engine.num_sharded_blocks == 4 and "fsdp_layer_prefixes" not in caplog.text
    with caplog.at_level("WARNING", logger="verl_omni.engine.sharding"):
        engine = make_engine(path=tiny_flux_path, model={"fsdp_layer_prefixes": ["transformer_blocks."]})
    assert engine.num_sharded_blocks == 2
    assert "single_transformer_blocks. (2 × FluxSingleTransformerBlock)" in caplog.text


@pytest.fixture
def cudnn_sdp_calls(monkeypatch):
    """The calls of `torch.backends.cuda.enable_cudnn_sdp` (recorded, not applied; the flag reads as on)."""
    calls: list[bool] = []
    monkeypatch.setattr(torch.backends.cuda, "enable_cudnn_sdp", calls.append)
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: not calls or calls[-1])
    return calls


@pytest.mark.parametrize(("model", "fsdp", "calls"), [
    pytest.param("flux", {}, [False], id="flux-off"),
    pytest.param("flux", {"cudnn_sdpa": True}, [], id="flux-key-keeps-it"),
    pytest.param("sd3", {}, [], id="sd3-keeps-it"),
    pytest.param("flux", {"forward_only": True}, [], id="flux-reference-keeps-it"),
])  # fmt: skip
def test_a_flux_training_engine_turns_cudnn_sdpa_off_once_for_its_process(
    make_engine, tiny_flux_path, tiny_sd3_path, cudnn_sdp_calls, caplog, model, fsdp, calls
):
    path = tiny_flux_path if model == "flux" else tiny_sd3_path
    actor = _actor(fsdp=fsdp)
    with caplog.at_level("INFO", logger="verl_omni.engine.auto_settings"):
        make_engine(path=path, actor=actor, model={})
        make_engine(path=path, actor=actor, model={})  # a second engine in the process: the call, no second line
    assert cudnn_sdp_calls == calls * 2
    said = [r.getMessage() for r in caplog.records if "cuDNN SDPA" in r.getMessage()]
    assert len(said) == len(calls)
    if calls:
        assert "actor_rollout_ref.actor.fsdp_config.cudnn_sdpa=null: the flux adapter turns it off" in said[0]
