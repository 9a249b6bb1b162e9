"""DiffusersRolloutEngine: generation, full and LoRA weight updates from in-memory tensors."""

import json
import shutil

import pytest
import torch
from diffusers import QwenImageTransformer2DModel, SD3Transformer2DModel
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict

from verl_omni.pipelines import make_generators
from verl_omni.rollout import DiffusersRolloutEngine

PROMPTS = ["a cat on a red chair", "two dogs in the snow"]
LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["to_q", "to_k", "to_v"], "init_lora_weights": "gaussian"}
TRANSFORMER_CLS = {"qwen_image": QwenImageTransformer2DModel, "sd3": SD3Transformer2DModel}


@pytest.fixture(params=["qwen_image", "sd3"])
def model(request):
    return request.param


@pytest.fixture
def engine(model, request, tiny_sampling_config):
    path = request.getfixturevalue(f"tiny_{model}_path")
    return DiffusersRolloutEngine(
        path, sampling=tiny_sampling_config.evolve(sde_window_size=2, sde_window_range=[0, 3])
    )


def _velocity(engine, module, traj):
    adapter = engine.pipeline.adapter
    with torch.no_grad():
        return adapter.velocity(
            module, traj["latents"][:, 0], traj["timesteps"][:, 0], adapter.conditioning(traj),
            guidance_scale=1.0, height=64, width=64,
        )  # fmt: skip


def test_generate_returns_trajectory(engine):
    traj = engine.generate(PROMPTS, generator=make_generators(0, 4))
    assert traj.batch_size == torch.Size([4])
    assert traj["images"].dtype == torch.uint8 and traj["images"].shape == (4, 3, 64, 64)
    assert traj["log_probs"].shape == (4, 2)
    again = engine.generate(PROMPTS, generator=make_generators(0, 4))
    assert torch.equal(traj["latents"], again["latents"])


def test_update_full_weights_from_tensors(model, engine, request, tmp_path):
    from verl_omni.testing import build_tiny_pipeline

    other_path = build_tiny_pipeline(model, tmp_path / "other", seed=123)
    other = TRANSFORMER_CLS[model].from_pretrained(other_path, subfolder="transformer")
    traj = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    before = _velocity(engine, engine.transformer, traj)
    loaded = engine.update_weights({f"transformer.{k}": v for k, v in other.state_dict().items()})
    assert loaded == len(other.state_dict()) and engine.weight_version == 1
    after = _velocity(engine, engine.transformer, traj)
    torch.testing.assert_close(after, _velocity(engine, other, traj), rtol=0, atol=0)
    assert not torch.allclose(before, after)


def test_update_lora_weights_from_tensors(model, engine, request):
    path = request.getfixturevalue(f"tiny_{model}_path")
    trained = TRANSFORMER_CLS[model].from_pretrained(path, subfolder="transformer")
    trained.add_adapter(LoraConfig(**LORA))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in trained.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    lora_sd = get_peft_model_state_dict(trained)
    assert lora_sd and all("lora_" in k for k in lora_sd)
    traj = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    base = _velocity(engine, engine.transformer, traj)
    assert engine.update_weights(lora_sd, lora_config=LORA) == len(lora_sd)
    torch.testing.assert_close(
        _velocity(engine, engine.transformer, traj), _velocity(engine, trained, traj), atol=1e-6, rtol=0
    )
    assert not torch.allclose(base, _velocity(engine, engine.transformer, traj))
    # a second sync replaces the adapter weights in place (zero B = base model again)
    zeros = {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in lora_sd.items()}
    engine.update_weights(zeros, lora_config=LORA)
    torch.testing.assert_close(_velocity(engine, engine.transformer, traj), base, atol=1e-6, rtol=0)
    assert engine.weight_version == 2


def test_update_rejects_unknown_names_shapes_and_empty_lora(engine):
    with pytest.raises(KeyError, match="match no parameter"):
        engine.update_weights({"not_a_layer.weight": torch.zeros(2)})
    name, param = next(iter(engine.transformer.named_parameters()))
    with pytest.raises(ValueError, match="shape"):
        engine.update_weights({name: torch.zeros(*param.shape, 3)})
    with pytest.raises(ValueError, match="target_modules"):
        engine.update_weights({}, lora_config={"r": 2, "target_modules": ["no_such_module"]}, adapter_name="x")


def test_unknown_model_name_lists_registered(tiny_sd3_path, tmp_path):
    folder = tmp_path / "weird"
    shutil.copytree(tiny_sd3_path, folder)
    index = json.loads((folder / "model_index.json").read_text())
    index["_class_name"] = "FluxPipeline"
    (folder / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(KeyError, match=r"FluxPipeline.*registered: .*qwen_image.*sd3"):
        DiffusersRolloutEngine(folder)


def test_sleep_and_wake_up_keep_results(engine):
    first = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    engine.sleep()
    assert next(engine.transformer.parameters()).device.type == "cpu"
    engine.wake_up()
    again = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert torch.equal(first["latents"], again["latents"])


def test_full_weights_reach_the_base_layers_under_a_lora_adapter(model, engine, tmp_path):
    from verl_omni.testing import build_tiny_pipeline

    engine.update_weights({}, lora_config=LORA)  # gaussian init: lora_B = 0, the adapter is a no-op
    wrapped = [n for n, _ in engine.transformer.named_parameters() if ".base_layer." in n]
    assert wrapped
    other = TRANSFORMER_CLS[model].from_pretrained(
        build_tiny_pipeline(model, tmp_path / "o", seed=7), subfolder="transformer"
    )
    traj = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert engine.update_weights(other.state_dict()) == len(other.state_dict())
    torch.testing.assert_close(
        _velocity(engine, engine.transformer, traj), _velocity(engine, other, traj), atol=1e-6, rtol=0
    )
