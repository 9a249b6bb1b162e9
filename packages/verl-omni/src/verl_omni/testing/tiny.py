"""Build complete random-weight diffusers pipeline folders (Qwen-Image, SD3, FLUX.1) offline, from small configs.

Every component (transformer, VAE, text encoder(s), tokenizer(s) trained in memory with `tokenizers`,
scheduler) is created from a config with weights drawn from a fixed seed, saved with `save_pretrained`, and a
`model_index.json` is written by the pipeline's own `save_pretrained`. The folder loads with the ordinary
`DiffusionPipeline.from_pretrained(folder)`. Nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import pathlib
import tempfile
from typing import Any

import torch

from verl_omni.testing.tiny_tokenizers import clip_tokenizer, qwen_tokenizer, t5_tokenizer

__all__ = ["PRESETS", "TinyPreset", "build_tiny_pipeline"]


@dataclasses.dataclass(frozen=True)
class TinyPreset:
    """Transformer size of a random pipeline (text encoders and VAE stay tiny in every preset)."""

    num_layers: int
    num_heads: int
    head_dim: int
    rope_axes: tuple[int, int, int]  # Qwen-Image and FLUX; sums to head_dim


PRESETS: dict[str, TinyPreset] = {
    "tiny": TinyPreset(num_layers=2, num_heads=2, head_dim=32, rope_axes=(8, 12, 12)),
    "small": TinyPreset(num_layers=4, num_heads=4, head_dim=64, rope_axes=(16, 24, 24)),
    "mid": TinyPreset(num_layers=16, num_heads=12, head_dim=128, rope_axes=(16, 56, 56)),
}


def build_tiny_pipeline(
    model: str,
    out_dir: str | pathlib.Path,
    *,
    preset: str = "tiny",
    seed: int = 0,
    torch_dtype: torch.dtype = torch.float32,
) -> pathlib.Path:
    """Write a random-weight pipeline folder for `model` ("qwen_image", "sd3" or "flux") and return its path.

    Args:
        model (`str`): `"qwen_image"` (`QwenImagePipeline`), `"sd3"` (`StableDiffusion3Pipeline`) or `"flux"`
            (`FluxPipeline`, guidance-distilled like FLUX.1-dev).
        out_dir (`str` or `pathlib.Path`): the folder to create (parents included).
        preset (`str`, defaults to `"tiny"`): transformer size, one of `PRESETS`.
        seed (`int`, defaults to 0): every component's weights are drawn after `torch.manual_seed(seed + k)`.
        torch_dtype (`torch.dtype`, defaults to float32): dtype the weights are saved in.

    Returns:
        The folder path; `DiffusionPipeline.from_pretrained(path)` loads it.

    Raises:
        ValueError: unknown `model` or `preset`.
    """
    if model not in _BUILDERS:
        raise ValueError(f"model: expected one of {sorted(_BUILDERS)}, got {model!r}")
    if preset not in PRESETS:
        raise ValueError(f"preset: expected one of {sorted(PRESETS)}, got {preset!r}")
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with torch.random.fork_rng(devices=[]):
        pipe = _BUILDERS[model](PRESETS[preset], seed)
        pipe.to(dtype=torch_dtype)
        pipe.save_pretrained(out, safe_serialization=True)
    return out


# ---- text encoders and VAE of SD3 and FLUX.1 ---------------------------------------------------------


def _clip_text_encoder(tokenizer: Any, hidden: int, seed: int, *, projection: bool) -> Any:
    """A 2-layer CLIP text encoder `hidden` wide for `tokenizer`, weights drawn after `torch.manual_seed(seed)`.

    `projection=True` gives `CLIPTextModelWithProjection` (`projection_dim = hidden`, SD3's two encoders), else
    `CLIPTextModel` (FLUX's pooled encoder).
    """
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    torch.manual_seed(seed)
    cfg = CLIPTextConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=77,
        **({"projection_dim": hidden} if projection else {}),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(cfg).eval()


def _t5_text_encoder(tokenizer: Any, d_model: int, seed: int) -> Any:
    """A 2-layer gated-GELU `T5EncoderModel` `d_model` wide for `tokenizer`, weights drawn after `manual_seed(seed)`."""
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(seed)
    cfg = T5Config(
        vocab_size=len(tokenizer),
        d_model=d_model,
        d_ff=128,
        d_kv=16,
        num_layers=2,
        num_heads=4,
        feed_forward_proj="gated-gelu",
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return T5EncoderModel(cfg).eval()


def _kl_vae(seed: int, *, scaling_factor: float, shift_factor: float) -> Any:
    """The 16-channel `AutoencoderKL` of SD3 and FLUX.1 (tiny widths), weights drawn after `manual_seed(seed)`."""
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        block_out_channels=[16, 16, 32, 32],
        layers_per_block=1,
        latent_channels=16,
        norm_num_groups=8,
        scaling_factor=scaling_factor,
        shift_factor=shift_factor,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )


# ---- Qwen-Image -------------------------------------------------------------------------------------


def _build_qwen_image(preset: TinyPreset, seed: int) -> Any:
    from diffusers import (
        AutoencoderKLQwenImage,
        FlowMatchEulerDiscreteScheduler,
        QwenImagePipeline,
        QwenImageTransformer2DModel,
    )
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    text_hidden = 64
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = qwen_tokenizer(pathlib.Path(tmp))
    torch.manual_seed(seed)
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": text_hidden,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 2048,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "bos_token_id": None,
            "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 1,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 2,
            "out_hidden_size": text_hidden,
            "fullatt_block_indexes": [0],
        },
    )
    text_encoder = Qwen2_5_VLForConditionalGeneration(config).eval()
    torch.manual_seed(seed + 1)
    transformer = QwenImageTransformer2DModel(
        patch_size=2,
        in_channels=64,
        out_channels=16,
        num_layers=preset.num_layers,
        attention_head_dim=preset.head_dim,
        num_attention_heads=preset.num_heads,
        joint_attention_dim=text_hidden,
        axes_dims_rope=preset.rope_axes,
    )
    torch.manual_seed(seed + 2)
    vae = AutoencoderKLQwenImage(
        base_dim=16, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=1, temperal_downsample=[False, True, True]
    )
    scheduler = FlowMatchEulerDiscreteScheduler(
        base_image_seq_len=256,
        base_shift=0.5,
        max_image_seq_len=8192,
        max_shift=0.9,
        shift_terminal=0.02,
        use_dynamic_shifting=True,
        time_shift_type="exponential",
    )
    return QwenImagePipeline(
        scheduler=scheduler, vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer
    )


# ---- SD3 ----------------------------------------------------------------------------------------------


def _build_sd3(preset: TinyPreset, seed: int) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    joint_dim = 64
    tokenizer, tokenizer_2 = clip_tokenizer(), clip_tokenizer()
    tokenizer_3 = t5_tokenizer()
    encoders = [
        _clip_text_encoder(tokenizer, hidden, seed + 10 + k, projection=True) for k, hidden in enumerate((32, 64))
    ]
    t5 = _t5_text_encoder(tokenizer_3, joint_dim, seed + 12)
    torch.manual_seed(seed + 1)
    inner = preset.num_heads * preset.head_dim
    transformer = SD3Transformer2DModel(
        sample_size=64,
        patch_size=2,
        in_channels=16,
        out_channels=16,
        num_layers=preset.num_layers,
        attention_head_dim=preset.head_dim,
        num_attention_heads=preset.num_heads,
        joint_attention_dim=joint_dim,
        caption_projection_dim=inner,
        pooled_projection_dim=32 + 64,
        pos_embed_max_size=96,
    )
    vae = _kl_vae(seed + 2, scaling_factor=1.5305, shift_factor=0.0609)
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=scheduler,
        vae=vae,
        text_encoder=encoders[0],
        tokenizer=tokenizer,
        text_encoder_2=encoders[1],
        tokenizer_2=tokenizer_2,
        text_encoder_3=t5,
        tokenizer_3=tokenizer_3,
    )


# ---- FLUX.1 -------------------------------------------------------------------------------------------


def _build_flux(preset: TinyPreset, seed: int) -> Any:
    """FLUX.1-dev's shape: CLIP-L pooled + T5 sequence, double and single stream blocks, a guidance embedding."""
    from diffusers import FlowMatchEulerDiscreteScheduler, FluxPipeline, FluxTransformer2DModel

    joint_dim, pooled_dim = 64, 32
    tokenizer, tokenizer_2 = clip_tokenizer(), t5_tokenizer()
    clip = _clip_text_encoder(tokenizer, pooled_dim, seed + 10, projection=False)
    t5 = _t5_text_encoder(tokenizer_2, joint_dim, seed + 12)
    torch.manual_seed(seed + 1)
    transformer = FluxTransformer2DModel(
        patch_size=1,
        in_channels=64,
        num_layers=preset.num_layers,
        num_single_layers=preset.num_layers,
        attention_head_dim=preset.head_dim,
        num_attention_heads=preset.num_heads,
        joint_attention_dim=joint_dim,
        pooled_projection_dim=pooled_dim,
        guidance_embeds=True,
        axes_dims_rope=preset.rope_axes,
    )
    vae = _kl_vae(seed + 2, scaling_factor=0.3611, shift_factor=0.1159)
    scheduler = FlowMatchEulerDiscreteScheduler(
        base_image_seq_len=256,
        base_shift=0.5,
        max_image_seq_len=4096,
        max_shift=1.15,
        shift=3.0,
        use_dynamic_shifting=True,
    )
    return FluxPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=clip,
        tokenizer=tokenizer,
        text_encoder_2=t5,
        tokenizer_2=tokenizer_2,
        transformer=transformer,
    )


def _build_wan(preset: TinyPreset, seed: int) -> Any:
    """Wan 2.1 text-to-video (`WanPipeline`): built in `verl_omni.testing.tiny_wan`."""
    from verl_omni.testing.tiny_wan import build_tiny_wan

    return build_tiny_wan(preset, seed)


_BUILDERS = {"qwen_image": _build_qwen_image, "sd3": _build_sd3, "flux": _build_flux, "wan": _build_wan}
