"""`verl_omni.models.flops`: forward FLOPs per sample from the transformer config, by hand and by torch's counter."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from verl_omni.models.flops import forward_flops, image_tokens

TINY_SD3 = {
    "num_layers": 1, "num_attention_heads": 1, "attention_head_dim": 4, "patch_size": 2, "in_channels": 4,
    "out_channels": 4, "joint_attention_dim": 8, "caption_projection_dim": 4, "pooled_projection_dim": 6,
}  # fmt: skip
# `build_tiny_pipeline("wan", preset="tiny")`'s transformer (`verl_omni.testing.tiny_wan`)
TINY_WAN = {
    "patch_size": [1, 2, 2], "num_attention_heads": 2, "attention_head_dim": 32, "in_channels": 16,
    "out_channels": 16, "text_dim": 32, "freq_dim": 32, "ffn_dim": 128, "num_layers": 2, "rope_max_seq_len": 64,
}  # fmt: skip


def test_forward_flops_sd3_one_block_by_hand():
    """One SD3 block (the last, `context_pre_only`), D = 4, 4 image tokens (a 4×4 latent in 2×2 patches), 3 text.

    A linear `i -> o` on `t` rows costs 2·t·i·o:
      patch embed 2·4·16·4 = 512, context_embedder 2·3·8·4 = 192, timestep MLP 2·256·4 + 2·4·4 = 2080,
      pooled text 2·6·4 + 2·4·4 = 80; the block: norm1 2·4·24 = 192, norm1_context (continuous) 2·4·8 = 64,
      QKV 2·4·4·12 + 2·3·4·12 = 672, to_out 2·4·4·4 = 128 (no to_add_out), ff 2·(2·4·4·16) = 1024 (no ff_context);
      norm_out 2·4·8 = 64, proj_out 2·4·4·16 = 512  ->  linear 5520.
    Attention over the 7 joint tokens: Q·Kᵀ and A·V, 2 · 2·7·7·4 = 784.
    """
    f = forward_flops("sd3", TINY_SD3, image_tokens=4, text_tokens=3)
    assert (f.linear, f.attention, f.total) == (5520, 784, 6304)


def test_image_tokens_follow_the_latent_grid_and_patching():
    assert image_tokens("sd3", {"patch_size": 2}, 512, 512, 8) == 1024
    assert image_tokens("qwen_image", {"patch_size": 2}, 512, 256, 8) == 512  # packed 2×2 latents
    assert image_tokens("flux", {"patch_size": 1}, 1024, 1024, 8) == 4096  # FLUX's patch_size 1 is after packing
    with pytest.raises(ValueError, match=r"image_tokens: flux generates images .* got num_frames=5"):
        image_tokens("flux", {"patch_size": 1}, 64, 64, 8, num_frames=5)


def test_image_tokens_of_a_wan_video_count_its_latent_frames():
    # Wan 2.1 at 480x832: 81 frames -> (81 - 1) / 4 + 1 = 21 latent frames of 60x104 latents in (1, 2, 2) patches
    wan = {"patch_size": [1, 2, 2]}  # a list, as config.json stores it
    assert image_tokens("wan", wan, 480, 832, 8, num_frames=81, temporal_scale=4) == 21 * 30 * 52
    assert image_tokens("wan", wan, 480, 832, 8, num_frames=33, temporal_scale=4) == 9 * 30 * 52  # the H200 preset
    assert image_tokens("wan", wan, 480, 832, 8) == 30 * 52  # one frame: one latent frame
    assert image_tokens("wan", {"patch_size": [2, 2, 2]}, 64, 64, 8, num_frames=13, temporal_scale=4) == 2 * 16
    with pytest.raises(ValueError, match=r"image_tokens: wan with num_frames=33 needs temporal_scale"):
        image_tokens("wan", wan, 480, 832, 8, num_frames=33)


def test_forward_flops_unknown_model_names_the_supported_ones():
    with pytest.raises(KeyError, match=r"no FLOPs formula for model 'hunyuan_video'.*flux, qwen_image, sd3, wan"):
        forward_flops("hunyuan_video", {}, image_tokens=1, text_tokens=1)


def test_forward_flops_refuse_wan_image_to_video():
    cfg = dict(TINY_WAN, image_dim=1280, added_kv_proj_dim=64)
    with pytest.raises(ValueError, match=r"`image_dim`: 1280: Wan image-to-video has no FLOPs formula"):
        forward_flops("wan", cfg, image_tokens=8, text_tokens=7)


def _sd3():
    from diffusers import SD3Transformer2DModel

    cfg = dict(TINY_SD3, num_layers=2, attention_head_dim=8, num_attention_heads=2, caption_projection_dim=16,
               sample_size=16, pos_embed_max_size=16, dual_attention_layers=(0,))  # fmt: skip
    m = SD3Transformer2DModel(**cfg)
    args = dict(hidden_states=torch.randn(1, 4, 16, 16), encoder_hidden_states=torch.randn(1, 7, 8),
                pooled_projections=torch.randn(1, 6), timestep=torch.tensor([500.0]))  # fmt: skip
    return m, args


def _qwen_image():
    from diffusers import QwenImageTransformer2DModel

    m = QwenImageTransformer2DModel(
        patch_size=2, in_channels=16, out_channels=4, num_layers=2, attention_head_dim=8, num_attention_heads=2,
        joint_attention_dim=12, axes_dims_rope=(2, 2, 4),
    )  # fmt: skip
    args = dict(hidden_states=torch.randn(1, 64, 16), encoder_hidden_states=torch.randn(1, 7, 12),
                encoder_hidden_states_mask=torch.ones(1, 7, dtype=torch.long), timestep=torch.tensor([0.5]),
                img_shapes=[(1, 8, 8)])  # fmt: skip
    return m, args


def _flux():
    from diffusers import FluxTransformer2DModel

    m = FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=2, attention_head_dim=8,
                               num_attention_heads=2, joint_attention_dim=12, pooled_projection_dim=6,
                               guidance_embeds=True, axes_dims_rope=(2, 2, 4))  # fmt: skip
    args = dict(hidden_states=torch.randn(1, 64, 16), encoder_hidden_states=torch.randn(1, 7, 12),
                pooled_projections=torch.randn(1, 6), timestep=torch.tensor([0.5]), guidance=torch.tensor([3.5]),
                img_ids=torch.zeros(64, 3), txt_ids=torch.zeros(7, 3))  # fmt: skip
    return m, args


@pytest.mark.parametrize("model, build", [("sd3", _sd3), ("qwen_image", _qwen_image), ("flux", _flux)])
def test_forward_flops_match_torch_flop_counter(model, build):
    """torch's `FlopCounterMode` counts every matmul, conv and bmm of a real forward (64 image, 7 text tokens).

    It counts no element-wise op (neither does the formula) and does not know the CPU's fused SDPA kernel, so the
    forward runs on SDPA's math backend, whose Q·Kᵀ and A·V are `bmm`s it counts. Tolerance: 0.1 % (they agree
    exactly here; a formula missing even one adaLN linear would be off by more).
    """
    torch.manual_seed(0)
    module, args = build()
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        module.eval()(**args)
    counted = counter.get_total_flops()
    assert counted > 0
    expected = forward_flops(model, dict(module.config), image_tokens=64, text_tokens=7)
    assert expected.total == pytest.approx(counted, rel=1e-3)


@pytest.mark.parametrize(
    "config, num_frames, height, width, text",
    [
        pytest.param(TINY_WAN, 5, 64, 64, 7, id="tiny-wan-5-frames"),  # 2 latent frames x 4 x 4 = 32 tokens
        pytest.param(dict(TINY_WAN, num_attention_heads=3, attention_head_dim=12, ffn_dim=80, num_layers=1), 13,
                     64, 48, 11, id="3-heads-13-frames"),  # 4 latent frames x 4 x 3 = 48 tokens
    ],
)  # fmt: skip
def test_wan_forward_flops_match_torch_flop_counter(config, num_frames, height, width, text):
    """Wan's formula against `FlopCounterMode` on a real `WanTransformer3DModel` forward, at the video tokens
    `image_tokens` counts from the frames (the 4x temporal VAE): Conv3d patch embedding, condition embedder, self-
    and cross-attention, FFN, output projection. SDPA on its math backend, tolerance 0.1 % (as the image models)."""
    from diffusers import WanTransformer3DModel

    torch.manual_seed(0)
    module = WanTransformer3DModel(**config).eval()
    tokens = image_tokens("wan", config, height, width, 8, num_frames=num_frames, temporal_scale=4)
    latents = torch.randn(1, config["in_channels"], (num_frames - 1) // 4 + 1, height // 8, width // 8)
    with FlopCounterMode(display=False) as counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        module(hidden_states=latents, timestep=torch.tensor([500.0]),
               encoder_hidden_states=torch.randn(1, text, config["text_dim"]))  # fmt: skip
    counted = counter.get_total_flops()
    assert counted > 0
    expected = forward_flops("wan", dict(module.config), image_tokens=tokens, text_tokens=text)
    assert expected.total == pytest.approx(counted, rel=1e-3)
