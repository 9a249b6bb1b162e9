"""Build a random-weight Wan 2.1 text-to-video pipeline (`WanPipeline`) offline, from small configs.

The components have Wan 2.1's shapes at a tiny width: `WanTransformer3DModel` (patch `(1, 2, 2)`, self- and
cross-attention blocks, 3-axis RoPE), the causal video VAE `AutoencoderKLWan` (8x spatial, 4x temporal
compression, 16 latent channels with the real `latents_mean`/`latents_std`), a `UMT5EncoderModel` and a
SentencePiece-style Unigram tokenizer trained in memory, and a `FlowMatchEulerDiscreteScheduler` with Wan's fixed
shift (`shift=3.0`, the 480p value; the real checkpoints ship `UniPCMultistepScheduler(flow_shift=3.0)`). Reached as
`build_tiny_pipeline("wan", ...)` / `actor_rollout_ref.model.path=tiny://wan`.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["build_tiny_wan"]


def build_tiny_wan(preset: Any, seed: int) -> Any:
    """A random `WanPipeline` with the transformer size of `preset` (a `TinyPreset`); weights seeded from `seed`.

    Args:
        preset (`TinyPreset`): `num_layers`, `num_heads`, `head_dim` of the transformer (`head_dim` is split into
            RoPE axes as Wan does: `t = head_dim - 4 * (head_dim // 6)`, `h = w = 2 * (head_dim // 6)`).
        seed (`int`): component `k` is drawn after `torch.manual_seed(seed + k)`.

    Returns:
        A `diffusers.WanPipeline` (not saved; `build_tiny_pipeline` saves it).
    """
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanPipeline, WanTransformer3DModel
    from transformers import UMT5Config, UMT5EncoderModel

    from verl_omni.testing.tiny_tokenizers import t5_tokenizer

    text_dim = 32
    tokenizer = t5_tokenizer()
    torch.manual_seed(seed + 12)
    text_encoder = UMT5EncoderModel(
        UMT5Config(
            vocab_size=len(tokenizer),
            d_model=text_dim,
            d_ff=64,
            d_kv=8,
            num_layers=2,
            num_heads=4,
            relative_attention_num_buckets=8,
            feed_forward_proj="gated-gelu",
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
        )
    ).eval()
    torch.manual_seed(seed + 1)
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2),
        num_attention_heads=preset.num_heads,
        attention_head_dim=preset.head_dim,
        in_channels=16,
        out_channels=16,
        text_dim=text_dim,
        freq_dim=32,
        ffn_dim=2 * preset.num_heads * preset.head_dim,
        num_layers=preset.num_layers,
        cross_attn_norm=True,
        qk_norm="rms_norm_across_heads",
        rope_max_seq_len=64,
    )
    torch.manual_seed(seed + 2)
    vae = AutoencoderKLWan(
        base_dim=8, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
    )
    scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=scheduler,
                       transformer=transformer)  # fmt: skip
