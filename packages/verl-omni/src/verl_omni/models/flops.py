"""Forward FLOPs per sample of the diffusion transformers, from their configs (SD3 / MMDiT, Qwen-Image, FLUX, Wan).

One multiply-add is 2 FLOPs. Counted: every linear and patch-embedding layer (the attention projections, the MLPs,
the adaLN modulation linears, which run once per sample on the timestep embedding, the input/output projections,
the timestep / guidance / pooled-text embedders) and the two matmuls of attention (`Q·Kᵀ` and `A·V`,
`2 · 2 · S² · D` for `S` tokens in one attention of width `D`). Not counted: element-wise work (norms, RoPE,
activations, the modulation's multiply-adds, softmax), a few FLOPs per element against `O(D)` per element in the
matmuls. LoRA adapters are not counted either (at rank `r` they add `r · (in + out) / (in · out)` to each adapted
linear: 4 % at r 32 on a 1536-wide projection). Wan 2.x is not covered (no formula: `forward_flops` raises).

The result splits into `linear` and `attention` FLOPs because their backward costs differ when the base weights
are frozen (LoRA): a frozen linear's backward is the input gradient only (1× its forward), attention's backward
is always the four matmuls of `dQ, dK, dV` (2× its forward). See `verl_omni.trainer.flops` for the per-stage count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ForwardFlops", "forward_flops", "image_tokens", "supported_models"]


@dataclasses.dataclass(frozen=True)
class ForwardFlops:
    """FLOPs of one forward of the transformer on one sample.

    Args:
        linear (`float`): FLOPs of the linear (and patch-embedding) layers.
        attention (`float`): FLOPs of the attention matmuls (`Q·Kᵀ` and `A·V`), quadratic in the tokens.
    """

    linear: float
    attention: float

    @property
    def total(self) -> float:
        """`linear + attention`."""
        return self.linear + self.attention

    def __add__(self, other: ForwardFlops) -> ForwardFlops:
        return ForwardFlops(self.linear + other.linear, self.attention + other.attention)

    def __mul__(self, k: float) -> ForwardFlops:
        return ForwardFlops(self.linear * k, self.attention * k)

    __rmul__ = __mul__


def _mm(tokens: float, fan_in: float, fan_out: float) -> float:
    """FLOPs of a linear layer `fan_in -> fan_out` applied to `tokens` rows."""
    return 2.0 * tokens * fan_in * fan_out


def _attn(queries: float, keys: float, width: float) -> float:
    """FLOPs of `Q·Kᵀ` and `A·V` for `queries` x `keys` tokens over all heads (`width` = heads x head_dim)."""
    return 2.0 * 2.0 * queries * keys * width


def _timestep_mlp(d: float) -> float:
    """The `TimestepEmbedding(256 -> D -> D)` of diffusers on one sample."""
    return _mm(1, 256, d) + _mm(1, d, d)


def _sd3(c: Mapping[str, Any], n_img: int, n_txt: int) -> ForwardFlops:
    """SD3 / SD3.5 (`SD3Transformer2DModel`, MMDiT): joint blocks; the last one is `context_pre_only`."""
    d = c["num_attention_heads"] * c["attention_head_dim"]
    p, cin = c.get("patch_size", 2), c.get("in_channels", 16)
    cout = c.get("out_channels") or cin
    dual = set(c.get("dual_attention_layers") or ())
    lin = _mm(n_img, cin * p * p, d)  # patch embedding (a strided conv)
    lin += _mm(n_txt, c["joint_attention_dim"], c.get("caption_projection_dim", d))  # context_embedder
    lin += _timestep_mlp(d) + _mm(1, c["pooled_projection_dim"], d) + _mm(1, d, d)  # time + pooled text
    att = 0.0
    layers = c["num_layers"]
    for i in range(layers):
        last = i == layers - 1
        lin += _mm(1, d, (9 if i in dual else 6) * d)  # norm1 (adaLN-Zero, SD3.5's X variant: 9 chunks)
        lin += _mm(1, d, (2 if last else 6) * d)  # norm1_context (continuous on the last block)
        lin += _mm(n_img, d, 3 * d) + _mm(n_txt, d, 3 * d)  # Q, K, V of both streams
        lin += _mm(n_img, d, d) + (0 if last else _mm(n_txt, d, d))  # to_out, to_add_out
        att += _attn(n_img + n_txt, n_img + n_txt, d)
        if i in dual:  # attn2: image tokens only
            lin += _mm(n_img, d, 4 * d)
            att += _attn(n_img, n_img, d)
        lin += _mm(n_img, d, 4 * d) * 2 + (0 if last else _mm(n_txt, d, 4 * d) * 2)  # ff, ff_context
    lin += _mm(1, d, 2 * d) + _mm(n_img, d, p * p * cout)  # norm_out, proj_out
    return ForwardFlops(lin, att)


def _qwen_image(c: Mapping[str, Any], n_img: int, n_txt: int) -> ForwardFlops:
    """Qwen-Image (`QwenImageTransformer2DModel`): dual-stream blocks with per-stream modulation and MLPs."""
    d = c["num_attention_heads"] * c["attention_head_dim"]
    p, cin = c.get("patch_size", 2), c.get("in_channels", 64)
    cout = c.get("out_channels") or cin
    lin = _mm(n_img, cin, d) + _mm(n_txt, c["joint_attention_dim"], d) + _timestep_mlp(d)  # img_in, txt_in, time
    block = _mm(1, d, 6 * d) * 2  # img_mod, txt_mod
    block += _mm(n_img + n_txt, d, 3 * d) + _mm(n_img + n_txt, d, d)  # Q, K, V and out of both streams
    block += _mm(n_img + n_txt, d, 4 * d) * 2  # img_mlp, txt_mlp
    lin += c["num_layers"] * block
    lin += _mm(1, d, 2 * d) + _mm(n_img, d, p * p * cout)  # norm_out, proj_out
    return ForwardFlops(lin, c["num_layers"] * _attn(n_img + n_txt, n_img + n_txt, d))


def _flux(c: Mapping[str, Any], n_img: int, n_txt: int) -> ForwardFlops:
    """FLUX.1 (`FluxTransformer2DModel`): double-stream blocks (as MMDiT), then single-stream blocks on all tokens."""
    d = c["num_attention_heads"] * c["attention_head_dim"]
    p, cin = c.get("patch_size", 1), c.get("in_channels", 64)
    cout = c.get("out_channels") or cin
    s = n_img + n_txt
    lin = _mm(n_img, cin, d) + _mm(n_txt, c["joint_attention_dim"], d)  # x_embedder, context_embedder
    lin += _timestep_mlp(d) * (2 if c.get("guidance_embeds") else 1)  # timestep (+ guidance) embedders
    lin += _mm(1, c["pooled_projection_dim"], d) + _mm(1, d, d)  # pooled text
    double = _mm(1, d, 6 * d) * 2 + _mm(s, d, 3 * d) + _mm(s, d, d) + _mm(s, d, 4 * d) * 2
    single = _mm(1, d, 3 * d) + _mm(s, d, 3 * d) + _mm(s, d, 4 * d) + _mm(s, 5 * d, d)  # norm, QKV, mlp, proj_out
    layers, singles = c["num_layers"], c.get("num_single_layers", 0)
    lin += layers * double + singles * single
    lin += _mm(1, d, 2 * d) + _mm(n_img, d, p * p * cout)  # norm_out, proj_out
    return ForwardFlops(lin, (layers + singles) * _attn(s, s, d))


def _wan(c: Mapping[str, Any], n_img: int, n_txt: int) -> ForwardFlops:
    """Wan 2.1 / 2.2 text-to-video (`WanTransformer3DModel`): blocks of self-, cross-attention and a GELU MLP.

    Per block: self-attention over the `n_img` video tokens, cross-attention from them to the `n_txt` text tokens
    (K, V projected from the text in every block), the MLP `D -> ffn_dim -> D`.

    Raises:
        ValueError: an image-to-video config (`image_dim` or `added_kv_proj_dim` set: an image context).
    """
    for key in ("image_dim", "added_kv_proj_dim"):
        if c.get(key) is not None:
            raise ValueError(f"transformer config `{key}`: {c[key]}: Wan image-to-video has no FLOPs formula (T2V)")
    d = c["num_attention_heads"] * c["attention_head_dim"]
    patch, cin = tuple(c.get("patch_size", (1, 2, 2))), c.get("in_channels", 16)
    cout = c.get("out_channels") or cin
    voxels = patch[0] * patch[1] * patch[2]
    freq, ffn = c.get("freq_dim", 256), c["ffn_dim"]
    lin = _mm(n_img, cin * voxels, d)  # patch_embedding (a strided Conv3d)
    lin += _mm(1, freq, d) + _mm(1, d, d) + _mm(1, d, 6 * d)  # condition_embedder: time_embedder, time_proj
    lin += _mm(n_txt, c["text_dim"], d) + _mm(n_txt, d, d)  # condition_embedder.text_embedder (2 linears)
    block = _mm(n_img, d, 3 * d) + _mm(n_img, d, d)  # attn1: Q, K, V, to_out on the video tokens
    block += _mm(n_img, d, d) + _mm(n_txt, d, 2 * d) + _mm(n_img, d, d)  # attn2: Q (video), K, V (text), to_out
    block += _mm(n_img, d, ffn) + _mm(n_img, ffn, d)  # ffn
    lin += c["num_layers"] * block
    lin += _mm(n_img, d, voxels * cout)  # proj_out (norm_out's modulation is a table added to temb: no matmul)
    att = c["num_layers"] * (_attn(n_img, n_img, d) + _attn(n_img, n_txt, d))  # self-, cross-attention
    return ForwardFlops(lin, att)


_FORMULAS: dict[str, Callable[[Mapping[str, Any], int, int], ForwardFlops]] = {
    "sd3": _sd3,
    "qwen_image": _qwen_image,
    "flux": _flux,
    "wan": _wan,
}
_TOKEN_PATCH = {"sd3": "patch_size", "qwen_image": None, "flux": None}  # None: packed 2x2 latents
_VIDEO = {"wan"}  # 3-D `patch_size` (t, h, w) over `(frames - 1) / temporal_scale + 1` latent frames


def supported_models() -> list[str]:
    """Adapter names (`verl_omni.models.registered_names`) with a FLOPs formula."""
    return sorted(_FORMULAS)


def image_tokens(
    model: str,
    transformer_config: Mapping[str, Any],
    height: int,
    width: int,
    vae_scale: int,
    *,
    num_frames: int = 1,
    temporal_scale: int | None = None,
) -> int:
    """Image (or video) tokens of one `height` x `width` sample: the latent grid (`/ vae_scale`) in patches.

    SD3 patches in the transformer (`patch_size`); Qwen-Image and FLUX pack 2 x 2 latents into one token before it.
    Wan's video of `num_frames` frames has `(num_frames - 1) // temporal_scale + 1` latent frames (the video VAE
    keeps the first frame alone), cut into `patch_size` `(t, h, w)` 3-D patches.

    Args:
        model (`str`): the adapter name (`supported_models()`).
        transformer_config (`Mapping`): the transformer's config (`patch_size`).
        height (`int`): pixels per sample.
        width (`int`): pixels per sample.
        vae_scale (`int`): pixels per latent cell along each spatial axis.
        num_frames (`int`, *optional*, defaults to 1): frames per sample; above 1 only for a video model (Wan).
        temporal_scale (`int`, *optional*): frames per latent frame (the VAE's `scale_factor_temporal`, Wan: 4);
            required for a video of more than one frame.

    Raises:
        KeyError: no formula for `model`.
        ValueError: `num_frames` above 1 for an image model, or for a video model without `temporal_scale`.
    """
    if _check(model) in _VIDEO:
        if num_frames > 1 and not temporal_scale:
            raise ValueError(
                f"image_tokens: {model} with num_frames={num_frames} needs temporal_scale (the VAE's "
                "scale_factor_temporal, the adapter's vae_scale_factor_temporal)"
            )
        pt, ph, pw = (int(x) for x in transformer_config.get("patch_size", (1, 2, 2)))
        frames = (int(num_frames) - 1) // (temporal_scale or 1) + 1
        return (frames // pt) * (height // (vae_scale * ph)) * (width // (vae_scale * pw))
    if num_frames != 1:
        raise ValueError(f"image_tokens: {model} generates images (num_frames 1), got num_frames={num_frames}")
    key = _TOKEN_PATCH[model]
    patch = int(transformer_config.get(key, 2)) if key else 2
    return (height // (vae_scale * patch)) * (width // (vae_scale * patch))


def forward_flops(model: str, transformer_config: Mapping[str, Any], *, image_tokens: int, text_tokens: int):
    """FLOPs of one forward of one sample (`ForwardFlops`), from the transformer's `config.json`.

    Args:
        model (`str`): the adapter name: `"sd3"`, `"qwen_image"`, `"flux"` or `"wan"`.
        transformer_config (`Mapping`): the transformer's config (`transformer/config.json` of the pipeline).
        image_tokens (`int`): image (Wan: video) tokens per sample (`image_tokens(...)`).
        text_tokens (`int`): text tokens per sample (the prompt embedding's length; SD3: 77 CLIP + the T5 length).

    Returns:
        `ForwardFlops`: linear and attention FLOPs.

    Raises:
        KeyError: no formula for `model`; names the supported ones.
        ValueError: a Wan image-to-video config (an image context; T2V only).
    """
    return _FORMULAS[_check(model)](transformer_config, int(image_tokens), int(text_tokens))


def _check(model: str) -> str:
    if model not in _FORMULAS:
        raise KeyError(f"no FLOPs formula for model {model!r}; supported: {', '.join(supported_models())}")
    return model
