"""`verl_omni.trainer.flops.StageFlops`: forwards per stage of a step's batch, the backward rule, MFU."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from verl_omni.models.flops import forward_flops
from verl_omni.trainer.flops import StageFlops

SD3 = {"num_layers": 2, "num_attention_heads": 2, "attention_head_dim": 8, "patch_size": 2, "in_channels": 4,
       "joint_attention_dim": 8, "caption_projection_dim": 16, "pooled_projection_dim": 6}  # fmt: skip
WAN = {"patch_size": [1, 2, 2], "num_attention_heads": 2, "attention_head_dim": 8, "in_channels": 16,
       "text_dim": 8, "freq_dim": 32, "ffn_dim": 32, "num_layers": 2}  # fmt: skip


def _batch(rows=4, k=3, steps=10, guidance=4.5, negative=True, text=7, mask=None, frames=None) -> TensorDict:
    data = {
        "height": torch.full((rows,), 64), "width": torch.full((rows,), 32),  # 8×4 latents: 4×2 = 8 tokens
        "num_inference_steps": torch.full((rows,), steps), "guidance_scale": torch.full((rows,), guidance),
        "prompt_embeds": torch.zeros(rows, text, 8), "log_probs": torch.zeros(rows, k),
    }  # fmt: skip
    if negative:
        data["negative_prompt_embeds"] = torch.zeros(rows, 5, 8)
    if mask is not None:
        data["train_step_mask"] = mask
    if frames is not None:  # a video trajectory (Wan)
        data["num_frames"] = torch.full((rows,), frames)
    return TensorDict(data, batch_size=[rows])


def test_stage_flops_count_the_forwards_of_each_stage():
    # CFG: per step one conditional (7 text tokens) and one unconditional (5) forward
    one = forward_flops("sd3", SD3, image_tokens=8, text_tokens=7) + forward_flops("sd3", SD3, image_tokens=8,
                                                                                   text_tokens=5)  # fmt: skip
    timing = {"gen": 1.0, "ref": 1.0, "update_actor": 1.0, "old_log_prob": 1.0}
    lora = StageFlops("sd3", SD3, 8, lora=True).stage_flops(_batch(), timing)
    full = StageFlops("sd3", SD3, 8, lora=False, ppo_epochs=2).stage_flops(_batch(), timing)
    assert lora["gen"] == pytest.approx(4 * 10 * one.total)  # every sampling step of every row
    assert lora["ref"] == lora["old_log_prob"] == pytest.approx(4 * 3 * one.total)  # the K trained steps
    # LoRA: forward + input gradients of the frozen linears (1x) + attention's backward (2x)
    assert lora["update_actor"] == pytest.approx(4 * 3 * (2 * one.linear + 3 * one.attention))
    assert full["update_actor"] == pytest.approx(2 * 4 * 3 * 3 * one.total)  # forward + 2x backward, two epochs


def test_stage_flops_without_cfg_mask_or_missing_stage():
    one = forward_flops("sd3", SD3, image_tokens=8, text_tokens=7)
    mask = torch.tensor([[True, False, False]] * 4)  # DanceGRPO: 4 of the 12 sample-steps trained
    got = StageFlops("sd3", SD3, 8, lora=True).stage_flops(_batch(guidance=1.0, mask=mask), {"gen", "ref"})
    assert got == {"gen": pytest.approx(4 * 10 * one.total), "ref": pytest.approx(4 * one.total)}
    # a clean-sample loss (DiffusionNFT) on a batch without `train_timesteps` trains nothing
    assert "perf/flops/update_actor" not in StageFlops("sd3", SD3, 8, lora=True, trains_on="clean").metrics(
        _batch(), {"update_actor": 1.0, "step": 2.0}
    )


def test_clean_and_pair_updates_count_unguided_forwards_of_the_rows_they_train():
    # DiffusionNFT: 4 rows x 2 trained timesteps, no CFG (7 text tokens only), old + reference no-grad forwards
    one = forward_flops("sd3", SD3, image_tokens=8, text_tokens=7)
    lora_bwd = one.linear + 2 * one.attention
    batch = _batch()  # CFG in the rollout: `gen` counts 2 forwards per step, the update none
    batch["train_timesteps"] = torch.zeros(4, 2)
    nft = StageFlops("sd3", SD3, 8, lora=True, ppo_epochs=2, trains_on="clean", old_forward=True, ref_forward=True)
    assert nft.stage_flops(batch, {"update_actor"}) == {
        "update_actor": pytest.approx(8 * 2 * one.total + 2 * 8 * (one.total + lora_bwd))
    }
    # DPO: the 2 pairs the update trained (not the rollout's 4 rows), reference forward always, one noise level each
    dpo = StageFlops("sd3", SD3, 8, lora=True, trains_on="pairs")
    got = dpo.stage_flops(_batch(rows=8), {"gen", "update_actor"}, update_batch=_batch(rows=4))
    assert got["update_actor"] == pytest.approx(4 * (2 * one.total + lora_bwd))
    assert got["gen"] == StageFlops("sd3", SD3, 8, lora=True).stage_flops(_batch(rows=8), {"gen"})["gen"]
    with pytest.raises(ValueError, match="trains_on must be one of"):
        StageFlops("sd3", SD3, 8, lora=True, trains_on="pair")


def test_stage_flops_of_wan_count_the_video_tokens_of_the_trajectorys_frames():
    # 9 frames -> 3 latent frames of the 8x4 latent grid in 2x2 patches: 3 x 4 x 2 = 24 video tokens per sample
    one = forward_flops("wan", WAN, image_tokens=24, text_tokens=7) + forward_flops("wan", WAN, image_tokens=24,
                                                                                  text_tokens=5)  # fmt: skip
    counter = StageFlops("wan", WAN, 8, lora=True, temporal_scale=4)
    got = counter.stage_flops(_batch(frames=9), {"gen", "update_actor"})
    assert got["gen"] == pytest.approx(4 * 10 * one.total)
    assert got["update_actor"] == pytest.approx(4 * 3 * (2 * one.linear + 3 * one.attention))
    single = forward_flops("wan", WAN, image_tokens=8, text_tokens=7) + forward_flops("wan", WAN, image_tokens=8,
                                                                                    text_tokens=5)  # fmt: skip
    assert counter.stage_flops(_batch(frames=1), {"gen"})["gen"] == pytest.approx(4 * 10 * single.total)


def test_metrics_mfu_against_the_peak_and_devices():
    counter = StageFlops("sd3", SD3, 8, lora=True, devices=2, peak_tflops=1e-6)  # 1 MFLOP/s per device
    timing = {"gen": 0.5, "update_actor": 2.0, "step": 4.0}
    m = counter.metrics(_batch(), timing)
    assert m["perf/mfu/gen"] == pytest.approx(m["perf/flops/gen"] / (0.5 * 2e6))
    assert m["perf/mfu/update_actor"] == pytest.approx(m["perf/flops/update_actor"] / (2.0 * 2e6))
    assert m["perf/mfu/step"] == pytest.approx((m["perf/flops/gen"] + m["perf/flops/update_actor"]) / (4.0 * 2e6))
    no_peak = StageFlops("sd3", SD3, 8, lora=True).metrics(_batch(), timing)
    assert "perf/flops/gen" in no_peak and not any(k.startswith("perf/mfu") for k in no_peak)  # the CPU: FLOPs only


def test_for_config_reads_the_pipeline_folder_and_logs_no_mfu_on_the_cpu(tiny_qwen_image_path):
    from verl_omni.trainer.config import load_config

    config = load_config([f"actor_rollout_ref.model.path={tiny_qwen_image_path}"], config_name="quickstart")
    on_cpu = StageFlops.for_config(config, "cpu")
    assert on_cpu.model == "qwen_image" and on_cpu.lora == config.actor_rollout_ref.model.use_lora
    assert on_cpu.peak_tflops is None and StageFlops.for_config(config, "cuda").peak_tflops == 790.0
    assert on_cpu.trains_on == "transitions" and not on_cpu.ref_forward
    nft = load_config([f"actor_rollout_ref.model.path={tiny_qwen_image_path}", "actor_rollout_ref.model.algorithm="
                       "diffusion_nft", "actor_rollout_ref.actor.diffusion_loss.ref_kl_coef=0.1"],
                      config_name="quickstart")  # fmt: skip
    got = StageFlops.for_config(nft, "cpu")
    assert (got.trains_on, got.old_forward, got.ref_forward) == ("clean", True, True)
    dpo = load_config([f"actor_rollout_ref.model.path={tiny_qwen_image_path}", "actor_rollout_ref.model.algorithm=dpo"],
                      config_name="quickstart")  # fmt: skip
    got = StageFlops.for_config(dpo, "cpu")
    assert (got.trains_on, got.old_forward, got.ref_forward) == ("pairs", False, True)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("model", ["sd3", "wan"])
def test_the_trainer_logs_each_stages_flops_and_on_cuda_its_mfu(request, tmp_path, model, device):
    # the step's metrics as the trainer logs them (`FlowGRPOTrainer.setup` + `_step_metrics`), with stand-in
    # components: the H200 run of workload A logged no perf/mfu/* because the trainer had lost its `StageFlops`;
    # the H200 Wan run logged none because Wan had no formula
    from types import SimpleNamespace

    from verl_omni.trainer.components import TrainerComponents
    from verl_omni.trainer.config import load_config
    from verl_omni.trainer.flow_grpo_trainer import FlowGRPOTrainer

    path = request.getfixturevalue(f"tiny_{model}_path")
    frames = ["actor_rollout_ref.rollout.pipeline.num_frames=5"] if model == "wan" else []
    config = load_config([f"actor_rollout_ref.model.path={path}", f"trainer.run_dir={tmp_path}",
                          "trainer.resume_mode=disable", *frames], config_name="quickstart")  # fmt: skip
    trainer = FlowGRPOTrainer(config)
    trainer.setup(TrainerComponents(
        actor=None, rollout=None, reward=None, prompts=SimpleNamespace(epoch=0), val_records=[],
        tracker=SimpleNamespace(begin=lambda step: None), total_steps=1, device=device,
        checkpoints=SimpleNamespace(resolve_resume=lambda *a: None, check_resume=lambda *a: None),
    ))  # fmt: skip
    batch = _batch(frames=5 if model == "wan" else None)
    batch["prompt_index"], batch["advantages"] = torch.tensor([0, 0, 1, 1]), torch.zeros(4, 3)
    timing = {"gen": 1.0, "ref": 0.5, "update_actor": 2.0, "step": 4.0}
    got = trainer._step_metrics(batch, torch.tensor([0.1, 0.2, 0.3, 0.4]), {}, 0, timing, 1)
    counter = StageFlops.for_config(config, device)
    assert counter.model == model and counter.temporal_scale == (4 if model == "wan" else None)
    want = counter.metrics(batch, timing)
    assert {k for k in want if k.startswith("perf/flops/")} == {
        f"perf/flops/{s}" for s in ("gen", "ref", "update_actor", "step")
    }
    assert {k: got.get(k) for k in want} == pytest.approx(want)
    mfu = {k for k in got if k.startswith("perf/mfu/")}
    assert mfu == ({"perf/mfu/gen", "perf/mfu/ref", "perf/mfu/update_actor", "perf/mfu/step"} if device == "cuda"
                   else set())  # fmt: skip
