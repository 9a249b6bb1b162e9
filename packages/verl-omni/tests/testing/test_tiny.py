"""Tiny random pipeline builder: complete folders, loadable with DiffusionPipeline, deterministic per seed."""

import json

import pytest
import torch
from diffusers import (
    AutoencoderKL,
    AutoencoderKLQwenImage,
    DiffusionPipeline,
    FluxPipeline,
    QwenImagePipeline,
    QwenImageTransformer2DModel,
    StableDiffusion3Pipeline,
)
from safetensors.torch import load_file

from verl_omni.testing import PRESETS, build_tiny_pipeline


@pytest.mark.parametrize(
    "model, cls, components",
    [
        ("qwen_image", QwenImagePipeline, {"transformer", "vae", "text_encoder", "tokenizer", "scheduler"}),
        ("sd3", StableDiffusion3Pipeline, {"transformer", "vae", "text_encoder", "text_encoder_2", "text_encoder_3",
                                           "tokenizer", "tokenizer_2", "tokenizer_3", "scheduler"}),
        ("flux", FluxPipeline, {"transformer", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2",
                                "scheduler"}),
    ],
)  # fmt: skip
def test_folder_is_a_complete_pipeline(model, cls, components, request):
    path = request.getfixturevalue(f"tiny_{model}_path")
    index = json.loads((path / "model_index.json").read_text())
    assert index["_class_name"] == cls.__name__
    assert components <= {k for k, v in index.items() if isinstance(v, list) and v[0] is not None}
    for name in components:
        assert (path / name).is_dir(), name
    pipe = DiffusionPipeline.from_pretrained(path)
    assert type(pipe) is cls
    vae_cls = AutoencoderKLQwenImage if model == "qwen_image" else AutoencoderKL
    assert isinstance(pipe.vae, vae_cls)


def test_same_seed_same_weights_other_seed_differs(tiny_qwen_image_path, tmp_path):
    again = build_tiny_pipeline("qwen_image", tmp_path / "again", seed=0)
    other = build_tiny_pipeline("qwen_image", tmp_path / "other", seed=1)
    for component in ("transformer", "vae", "text_encoder"):
        ref = load_file(next((tiny_qwen_image_path / component).glob("*.safetensors")))
        same = load_file(next((again / component).glob("*.safetensors")))
        diff = load_file(next((other / component).glob("*.safetensors")))
        assert ref.keys() == same.keys()
        assert all(torch.equal(ref[k], same[k]) for k in ref), component
        assert any(not torch.equal(ref[k], diff[k]) for k in ref if ref[k].numel() > 1), component
    assert (tiny_qwen_image_path / "tokenizer" / "tokenizer.json").read_text() == (
        again / "tokenizer" / "tokenizer.json"
    ).read_text()


def test_presets_select_transformer_size(tmp_path):
    path = build_tiny_pipeline("qwen_image", tmp_path / "small", preset="small")
    transformer = QwenImageTransformer2DModel.from_pretrained(path, subfolder="transformer")
    small = PRESETS["small"]
    assert transformer.config.num_layers == small.num_layers
    assert transformer.config.num_attention_heads * transformer.config.attention_head_dim == 256
    assert PRESETS["mid"].num_heads * PRESETS["mid"].head_dim == 1536 and PRESETS["mid"].num_layers == 16
    assert sum(PRESETS["mid"].rope_axes) == PRESETS["mid"].head_dim


def test_bad_model_and_preset(tmp_path):
    with pytest.raises(ValueError, match="model: expected one of"):
        build_tiny_pipeline("not_a_model", tmp_path)
    with pytest.raises(ValueError, match="preset: expected one of"):
        build_tiny_pipeline("sd3", tmp_path, preset="huge")
