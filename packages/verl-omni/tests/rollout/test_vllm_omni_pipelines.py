"""The FLUX and Wan vLLM-Omni log-prob pipelines without vllm-omni: the real `forward` over stand-ins of vllm-omni
0.26.0's `FluxPipeline` / `Wan22Pipeline` (their attributes, `encode_prompt` and transformer `forward` signatures,
taken from that release's source) wrapping the tiny diffusers components, checked against the diffusers pipeline.

The signatures the stand-ins copy are also contract rows (`contract.py`: `flux-*`, `wan-*`), which
`nox -s vllm_omni-0.26` checks against the real wheel; nothing here has run on vLLM-Omni itself.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from verl_omni.pipelines import DiffusionSamplingConfig, sample_with_logprob
from verl_omni.rollout.vllm_omni import compat, lora, pipelines

PROMPT = "a cat on a red chair"


class _OmniFluxTransformer(torch.nn.Module):
    """vllm-omni 0.26 `FluxTransformer2DModel.forward`'s signature, computing with a diffusers transformer."""

    packed_modules_mapping = {"to_qkv": ["to_q", "to_k", "to_v"],  # noqa: RUF012 - as the vLLM-Omni class
                              "add_kv_proj": ["add_q_proj", "add_k_proj", "add_v_proj"]}  # fmt: skip

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.calls: list[set[str]] = []

    def forward(self, hidden_states, encoder_hidden_states=None, pooled_projections=None, timestep=None,
                img_ids=None, txt_ids=None, guidance=None, joint_attention_kwargs=None, return_dict=True):  # fmt: skip
        self.calls.append({k for k, v in locals().items() if v is not None and k not in ("self", "__class__")})
        return self.inner(hidden_states=hidden_states, encoder_hidden_states=encoder_hidden_states,
                          pooled_projections=pooled_projections, timestep=timestep, img_ids=img_ids, txt_ids=txt_ids,
                          guidance=guidance, joint_attention_kwargs=joint_attention_kwargs,
                          return_dict=return_dict)  # fmt: skip


class _OmniWanTransformer(torch.nn.Module):
    """vllm-omni 0.26 `WanTransformer3DModel.forward`'s signature (no `config` dict), over a diffusers transformer."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.patch_embedding = inner.patch_embedding
        self.calls: list[tuple[int, ...]] = []

    def forward(self, hidden_states, timestep, encoder_hidden_states, encoder_hidden_states_image=None,
                intermediate_tensors=None, return_dict=True, attention_kwargs=None):  # fmt: skip
        self.calls.append(tuple(hidden_states.shape))
        return self.inner(hidden_states=hidden_states, timestep=timestep, encoder_hidden_states=encoder_hidden_states,
                          return_dict=return_dict)  # fmt: skip


class _OmniFlux(torch.nn.Module):
    """vllm-omni 0.26 `FluxPipeline`'s attributes and `encode_prompt` (no `device`, no `image_processor`)."""

    def __init__(self, *, od_config: Any, prefix: str = "") -> None:
        super().__init__()
        from verl_omni.pipelines import FluxPipelineWithLogProb

        self.od_config = od_config
        self._ref = FluxPipelineWithLogProb.from_pretrained(od_config.model)
        self.vae, self.device = self._ref.vae, torch.device("cpu")
        self.transformer = _OmniFluxTransformer(self._ref.transformer)
        self.vae_scale_factor = 2 ** (len(self.vae.config.block_out_channels) - 1)
        self.tokenizer_max_length = 77

    def encode_prompt(self, prompt, prompt_2, num_images_per_prompt=1, prompt_embeds=None, pooled_prompt_embeds=None,
                      max_sequence_length=512):  # fmt: skip
        return self._ref.encode_prompt(prompt=prompt, prompt_2=prompt_2, num_images_per_prompt=num_images_per_prompt,
                                       max_sequence_length=max_sequence_length)  # fmt: skip


class _OmniWan(torch.nn.Module):
    """vllm-omni 0.26 `Wan22Pipeline`'s attributes and `encode_prompt` (no `video_processor`, no `config`)."""

    def __init__(self, *, od_config: Any, prefix: str = "") -> None:
        super().__init__()
        from verl_omni.pipelines import WanPipelineWithLogProb

        self.od_config = od_config
        self._ref = WanPipelineWithLogProb.from_pretrained(od_config.model)
        self.vae, self.device = self._ref.vae, torch.device("cpu")
        self.transformer = _OmniWanTransformer(self._ref.transformer)
        self.transformer_2, self.boundary_ratio, self.expand_timesteps = None, None, False
        self.vae_scale_factor_temporal = self.vae.config.scale_factor_temporal
        self.vae_scale_factor_spatial = self.vae.config.scale_factor_spatial

    def encode_prompt(self, prompt, negative_prompt=None, do_classifier_free_guidance=True, num_videos_per_prompt=1,
                      max_sequence_length=512, device=None, dtype=None):  # fmt: skip
        return self._ref.encode_prompt(prompt=prompt, negative_prompt=negative_prompt,
                                       do_classifier_free_guidance=do_classifier_free_guidance,
                                       num_videos_per_prompt=num_videos_per_prompt,
                                       max_sequence_length=max_sequence_length, device=device)  # fmt: skip


class _DiffusionOutput:
    def __init__(self, **kwargs: Any) -> None:
        self.__dict__.update(kwargs)


@pytest.fixture
def omni_026(monkeypatch):
    """`compat.require()` answers vllm-omni 0.26.0; `vllm_omni.diffusion.data.DiffusionOutput` is a stand-in."""
    monkeypatch.setattr(compat, "require", lambda what="": compat.detect("0.26.0", "0.26.0"))
    for name in ("vllm_omni", "vllm_omni.diffusion"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    data = types.ModuleType("vllm_omni.diffusion.data")
    data.DiffusionOutput = _DiffusionOutput
    monkeypatch.setitem(sys.modules, "vllm_omni.diffusion.data", data)


CASES = {
    "flux": (_OmniFlux, "tiny_flux_path", {"height": 32, "width": 32, "guidance_scale": 3.5}),
    "wan": (_OmniWan, "tiny_wan_path", {"height": 32, "width": 32, "num_frames": 5, "guidance_scale": 4.0}),
}


@pytest.mark.parametrize("model", ["flux", "wan"])
def test_forward_samples_what_the_diffusers_pipeline_samples(model, omni_026, request):
    """`LogProbOmniPipelineMixin.forward` over the vLLM-Omni-shaped pipeline returns the diffusers pipeline's exact
    images and trajectory, in the 0.26 output envelope (`"image"`, or Wan's `"video"` as `(B, 3, F, H, W)`)."""
    base, fixture, sizes = CASES[model]
    folder = request.getfixturevalue(fixture)
    cls = type(f"{model}Omni", (pipelines.LogProbOmniPipelineMixin, *pipelines._EXTRA_BASES.get(model, ()), base),
               {"adapter_name": model})  # fmt: skip
    pipe = cls(od_config=SimpleNamespace(model=str(folder)))
    config = DiffusionSamplingConfig(n=2, num_inference_steps=3, max_sequence_length=16, noise_level=0.7,
                                     sde_window_size=2, seed=5, **sizes)  # fmt: skip
    params = SimpleNamespace(extra_args=pipelines.sampling_extra_args(config))
    req = SimpleNamespace(prompts=[{"prompt": PROMPT}], sampling_params_list=[params])
    out = pipe.forward(req)

    ref = pipe._ref
    with torch.no_grad():
        want = sample_with_logprob(ref, ref.adapter, ref.sde_scheduler, [PROMPT], config)
    key = "video" if model == "wan" else "image"
    assert list(out.output["payload"]) == [key] and out.to_cpu is True
    trajectory = out.output["metadata"]["verl_trajectory"]
    assert sorted(trajectory) == sorted(want.trajectory.keys())
    for name in trajectory:
        assert torch.equal(trajectory[name], want.trajectory[name].cpu()), name
    assert torch.equal(trajectory["images"], want.images)
    torch.testing.assert_close(out.trajectory_log_probs, want.trajectory["log_probs"])
    media = out.output["payload"][key]
    if model == "wan":
        assert want.images.shape == (2, 5, 3, 32, 32)
        assert media.shape == (2, 3, 5, 32, 32) and pipe.transformer.calls[0] == (2, 16, 2, 4, 4)
        torch.testing.assert_close(media, want.images.permute(0, 2, 1, 3, 4).float() / 127.5 - 1)
    else:
        assert media.shape == (2, 3, 32, 32)
        assert pipe.transformer.calls[0] == {"hidden_states", "encoder_hidden_states", "pooled_projections",
                                             "timestep", "img_ids", "txt_ids", "guidance", "return_dict"}  # fmt: skip


def test_flux_pipeline_exposes_its_fused_projections_to_the_lora_manager():
    """vllm-omni 0.26's FLUX transformer keeps `stacked_params_mapping` local, so the manager could not bind
    `to_q`/`to_k`/`to_v` adapters to `to_qkv`; the FLUX pipeline sets the rows its `load_weights` uses."""

    class Base(torch.nn.Module):
        def __init__(self, *, od_config: Any, prefix: str = "") -> None:
            super().__init__()
            self.transformer = _OmniFluxTransformer(torch.nn.Linear(1, 1))

    assert pipelines._EXTRA_BASES["flux"] == (pipelines.PackedLoRAMappingMixin,)
    pipe = type("P", (*pipelines._EXTRA_BASES["flux"], Base), {})(od_config=None)
    # FluxTransformer2DModel.load_weights' local list in vllm-omni 0.26.0
    assert pipe.transformer.stacked_params_mapping == [
        (".to_qkv", ".to_q", "q"), (".to_qkv", ".to_k", "k"), (".to_qkv", ".to_v", "v"),
        (".add_kv_proj", ".add_q_proj", "q"), (".add_kv_proj", ".add_k_proj", "k"),
        (".add_kv_proj", ".add_v_proj", "v"),
    ]  # fmt: skip
    assert lora._packed_mapping(pipe) == {"to_qkv": ["to_q", "to_k", "to_v"],
                                          "add_kv_proj": ["add_q_proj", "add_k_proj", "add_v_proj"]}  # fmt: skip
    own = _OmniFluxTransformer(torch.nn.Linear(1, 1))
    own.stacked_params_mapping = [(".attn1.to_qkv", ".attn1.to_q", "q")]
    assert pipelines.expose_packed_mapping(own) is False and len(own.stacked_params_mapping) == 1  # kept
    assert pipelines.expose_packed_mapping(None) is False


def test_align_adapter_renames_wan_feed_forward_and_output_projections(monkeypatch):
    """diffusers' Wan `ffn.net.0.proj` / `ffn.net.2` / `attn1.to_out.0` bind vLLM-Omni's `ffn.net_0.proj` /
    `ffn.net_2` / `attn1.to_out`; FLUX's `to_out.0` is a served name in vLLM-Omni and stays."""
    served = {"blocks.0.attn1.to_q", "blocks.0.attn1.to_out", "blocks.0.attn2.to_k", "blocks.0.ffn.net_0.proj",
              "blocks.0.ffn.net_2", "transformer_blocks.0.attn.to_out.0"}  # fmt: skip
    monkeypatch.setattr(lora, "_layer_names", lambda pipeline: served)
    diffusers = ["blocks.0.attn1.to_q", "transformer.blocks.0.attn1.to_out.0", "blocks.0.attn2.to_k",
                 "base_model.model.blocks.0.ffn.net.0.proj", "blocks.0.ffn.net.2",
                 "transformer_blocks.0.attn.to_out.0", "blocks.0.norm.0"]  # fmt: skip
    tensors = {f"{m}.lora_{ab}.weight": object() for m in diffusers for ab in "AB"}
    renamed, config = lora.align_adapter(object(), tensors, {"r": 4, "target_modules": "all-linear"})
    assert {k.rsplit(".lora_", 1)[0] for k in renamed} == {
        "blocks.0.attn1.to_q", "transformer.blocks.0.attn1.to_out", "blocks.0.attn2.to_k",
        "base_model.model.blocks.0.ffn.net_0.proj", "blocks.0.ffn.net_2", "transformer_blocks.0.attn.to_out.0",
        "blocks.0.norm.0",  # binds nothing either way: left for check_binding to name
    }  # fmt: skip
    assert config["target_modules"] == ["net_2", "norm.0", "proj", "to_k", "to_out", "to_out.0", "to_q"]


def test_envelope_factory_merges_the_envelope_wans_post_processing_returns():
    """vllm-omni 0.26's Wan post-processing takes a video tensor and returns its own envelope: the wrapper hands it
    `payload["video"]` and keeps the pipeline's trajectory metadata beside Wan's."""
    import inspect

    def wan_like_factory(od_config):  # the shape of get_wan22_post_process_func
        def post_process_func(video: torch.Tensor, output_type: str = "np", sampling_params=None):
            if not isinstance(video, torch.Tensor):
                raise TypeError(f"expected a video tensor, got {type(video)}")
            return {"payload": {"video": video + 1}, "metadata": {"video": {"fps": 16}, "verl_trajectory": "theirs"}}

        return post_process_func

    func = compat._envelope_factory(wan_like_factory)("cfg")
    assert "sampling_params" in inspect.signature(func).parameters
    out = func({"payload": {"video": torch.zeros(1, 3, 5, 2, 2)}, "metadata": {"verl_trajectory": "ours"}})
    assert list(out["payload"]) == ["video"] and torch.equal(out["payload"]["video"], torch.ones(1, 3, 5, 2, 2))
    assert out["metadata"] == {"video": {"fps": 16}, "verl_trajectory": "ours"}


def test_media_output_lays_videos_out_as_a_stock_decode_and_refuses_other_shapes():
    videos = torch.randint(0, 256, (2, 5, 3, 4, 6), dtype=torch.uint8)
    media = compat.media_output(videos, video=True)
    assert media.shape == (2, 3, 5, 4, 6) and torch.equal(media[1, 2, 3], videos[1, 3, 2].float() / 127.5 - 1)
    assert compat.media_output(videos[:, 0]).shape == (2, 3, 4, 6)
    with pytest.raises(ValueError, match=r"images: expected uint8 videos \(B, F, 3, H, W\), got shape \(2, 3, 4, 6\)"):
        compat.media_output(videos[:, 0], video=True)
    with pytest.raises(ValueError, match=r"images: expected uint8 images \(B, 3, H, W\), got shape \(2, 5, 3, 4, 6\)"):
        compat.media_output(videos)


def test_warm_up_request_keeps_its_frame_count():
    """vLLM-Omni's warm-up request carries `num_frames` (1); a video request without `verl_sampling` keeps its own."""
    warmup = SimpleNamespace(height=32, width=32, num_inference_steps=1, num_outputs_per_prompt=1, num_frames=5,
                             guidance_scale=0.0, seed=None, extra_args=None)  # fmt: skip
    assert pipelines.request_sampling_config(warmup).num_frames == 5


@pytest.mark.parametrize(
    ("fields", "error"),
    [({"transformer_2": torch.nn.Linear(1, 1)}, "two-expert"), ({"boundary_ratio": 0.875}, "two-expert"),
     ({"expand_timesteps": True}, "expand_timesteps")],
)  # fmt: skip
def test_wan_view_shows_the_adapter_wan22s_expert_fields(fields, error, tiny_wan_path):
    """vLLM-Omni's `Wan22Pipeline` has no diffusers `config`: the view carries its `transformer_2` /
    `boundary_ratio` / `expand_timesteps` attributes so the Wan adapter refuses a Wan 2.2 pipeline by name."""
    from verl_omni.models.base import get_class

    adapter = get_class("wan").from_pretrained(str(tiny_wan_path))
    parts = {"vae": None, "transformer": None, "device": "cpu", "vae_scale_factor_spatial": 8, "transformer_2": None,
             "boundary_ratio": None, "expand_timesteps": False}  # fmt: skip
    view = pipelines._PipeView(SimpleNamespace(**{**parts, **fields}), "wan")
    with pytest.raises(ValueError, match=rf"model: Wan 2\.2.*{error}"):
        adapter.encode_prompts(view, [PROMPT], negative_prompt=None, do_cfg=False, max_sequence_length=16,
                               device="cpu")  # fmt: skip
