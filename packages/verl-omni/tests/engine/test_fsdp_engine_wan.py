"""`DiffusersFSDPEngine` on the tiny Wan 2.1 (one process, gloo, CPU, fp32): 5-D video trajectories with CFG,
`blocks.` sharded by default, full and LoRA updates, bit-identical resume."""

from __future__ import annotations

import pytest
import torch

from verl_omni.pipelines import DiffusionSamplingConfig, WanPipelineWithLogProb, sample_with_logprob

from .test_fsdp_engine import _actor, _changed, _params, _with_update_keys, assert_resume_is_bit_identical

SAMPLING = {"n": 2, "num_inference_steps": 4, "height": 32, "width": 32, "num_frames": 5, "max_sequence_length": 32,
            "sde_window_size": 2, "guidance_scale": 4.0, "seed": 0}  # fmt: skip


@pytest.fixture(scope="module")
def wan_trajectory(tiny_wan_path):
    """2 prompts x 2 videos of 5 frames (2 latent frames), CFG 4, K = 2; not decoded (the VAE is slow on a CPU)."""
    pipe = WanPipelineWithLogProb.from_pretrained(tiny_wan_path)
    with torch.no_grad():
        prompts = ["a cat on a red chair", "two dogs in the snow"]
        config = DiffusionSamplingConfig(**SAMPLING)
        out = sample_with_logprob(pipe, pipe.adapter, pipe.sde_scheduler, prompts, config, decode=False)
    assert out.trajectory["latents"].shape == (4, 3, 16, 2, 4, 4)
    return out.trajectory


def test_wan_engine_shards_each_block_by_the_adapter_default_and_a_config_value_wins(make_engine, tiny_wan_path,
                                                                                  caplog):  # fmt: skip
    """No `fsdp_layer_prefixes`: `WanAdapter.fsdp_layer_prefixes` (`blocks.`) shards both blocks, logged with its
    source; an explicit value replaces it (and a prefix Wan lacks is refused naming the key)."""
    with caplog.at_level("INFO", logger="verl_omni.engine.sharding"):
        engine = make_engine(path=tiny_wan_path)
    assert engine.fsdp_layer_prefixes == ["blocks."] and engine.num_sharded_blocks == 2
    assert "['blocks.'] (the WanAdapter default)" in caplog.text
    with pytest.raises(ValueError, match=r"fsdp_layer_prefixes: 'transformer_blocks\.' names no submodule"):
        make_engine(path=tiny_wan_path, model={"fsdp_layer_prefixes": ["transformer_blocks."]})


def test_wan_full_update_shards_and_trains_the_blocks(make_engine, tiny_wan_path, wan_trajectory):
    engine = make_engine(path=tiny_wan_path, actor=_actor(mini=1), model={})
    assert engine.num_lora_modules == 0 and engine.num_sharded_blocks == 2
    before = _params(engine)
    engine.update_policy(_with_update_keys(wan_trajectory, wan_trajectory["log_probs"]))
    changed = _changed(before, _params(engine))
    for prefix in ("blocks.0.attn1.", "blocks.1.attn2.", "blocks.1.ffn.", "condition_embedder."):
        assert any(n.startswith(prefix) for n in changed), prefix


def test_wan_lora_update_reproduces_the_rollout_and_trains_only_lora(make_engine, tiny_wan_path, wan_trajectory):
    """LoRA B = 0 at the start: the training forwards (cond + uncond, CFG 4) give the rollout's log-probs (ratio 1)."""
    engine = make_engine(path=tiny_wan_path, model={"lora_rank": 4, "lora_alpha": 8})
    before = _params(engine)
    metrics = engine.update_policy(_with_update_keys(wan_trajectory, wan_trajectory["log_probs"]))
    assert abs(metrics["actor/ratio_mean"] - 1.0) < 1e-6, metrics
    changed = _changed(before, _params(engine))
    assert changed and all("lora_" in n for n in changed)
    assert any(".attn2." in n for n in changed)  # cross-attention to the text is adapted too


@pytest.mark.parametrize("model", [{"lora_rank": 4, "lora_alpha": 8}, {}], ids=["lora", "full"])
def test_wan_checkpoint_resume_is_bit_identical(make_engine, tiny_wan_path, wan_trajectory, tmp_path, model):
    assert_resume_is_bit_identical(make_engine, tiny_wan_path, wan_trajectory, tmp_path / "ckpt", model)


def test_wan_update_raises_the_log_prob_of_positive_advantages(make_engine, tiny_wan_path, wan_trajectory):
    """One LoRA update with advantages +1 on the first video of each group and −1 on the second: the summed window
    log-prob rises for the +1 videos and falls for the −1 videos (the update's direction, row by row, on videos)."""
    engine = make_engine(path=tiny_wan_path, actor=_actor(mini=2, lr=1e-2), model={"lora_rank": 4, "lora_alpha": 8})
    batch = wan_trajectory.clone()
    batch["old_log_probs"] = wan_trajectory["log_probs"]
    batch["advantages"] = torch.tensor([1.0, -1.0, 1.0, -1.0])
    engine.update_policy(batch)
    delta = (engine.compute_log_prob(wan_trajectory)["old_log_probs"] - wan_trajectory["log_probs"]).sum(dim=1)
    assert (delta[[0, 2]] > 0).all() and (delta[[1, 3]] < 0).all(), delta
