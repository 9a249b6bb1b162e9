"""`DiffusionModelBase`: the model adapter contract, and the registry (`register`, `get_class`)."""

from __future__ import annotations

import abc
import json
import pathlib
from collections.abc import Callable
from typing import Any, ClassVar

import torch
from tensordict import TensorDict

from verl_core.registry import Registry
from verl_omni.schedulers.flow_match_sde import FlowMatchSDEDiscreteScheduler, FlowMatchSDESchedulerOutput
from verl_omni.schedulers.settings import setting_name

__all__ = [
    "DiffusionModelBase",
    "adapter_for_folder",
    "calculate_shift",
    "get_class",
    "register",
    "registered_names",
    "to_uint8",
]

_REGISTRY: Registry[type[DiffusionModelBase]] = Registry("diffusion model", key="model name")
"""Adapter name and each pipeline `_class_name` alias -> adapter class."""


def register(name: str) -> Callable[[type[DiffusionModelBase]], type[DiffusionModelBase]]:
    """Class decorator: register an adapter under `name` (and its `pipeline_class_names`).

    Raises:
        ValueError: `name` or an alias is already registered to another class (nothing is registered).
    """

    def deco(cls: type[DiffusionModelBase]) -> type[DiffusionModelBase]:
        _REGISTRY.add(name, cls, *cls.pipeline_class_names)
        cls.name = name
        return cls

    return deco


def registered_names() -> list[str]:
    """Return every registered adapter name and pipeline class alias, sorted."""
    return _REGISTRY.names()


def get_class(name: str, external_lib: str | None = None) -> type[DiffusionModelBase]:
    """Return the adapter class registered as `name` (an adapter name or a pipeline `_class_name`).

    Args:
        name (`str`): e.g. `"qwen_image"`, `"sd3"`, `"QwenImagePipeline"`.
        external_lib (`str`, *optional*): a module that registers more adapters; imported once, when `name`
            is not yet registered.

    Raises:
        KeyError: `name` is unknown after importing `external_lib` (the message suggests a close name and lists the
            registered ones).
        ImportError: `external_lib` cannot be imported.
    """
    return _REGISTRY.get(name, import_module=external_lib)


def adapter_for_folder(path: str | pathlib.Path, external_lib: str | None = None) -> DiffusionModelBase:
    """Build the adapter for a diffusers pipeline folder from its `model_index.json` `_class_name`."""
    index = json.loads((pathlib.Path(path) / "model_index.json").read_text())
    return get_class(index["_class_name"], external_lib).from_pretrained(path)


def calculate_shift(seq_len: int, base_len: int, max_len: int, base_shift: float, max_shift: float) -> float:
    """Resolution-dependent shift `μ`, linear in the number of latent tokens (as the stock pipeline)."""
    m = (max_shift - base_shift) / (max_len - base_len)
    return seq_len * m + (base_shift - m * base_len)


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """Float images in [0, 1] `(B, 3, H, W)` to uint8 (round half to even, clamp)."""
    return (images.float() * 255).round().clamp(0, 255).to(torch.uint8)


def _read_json(path: pathlib.Path) -> dict[str, Any]:
    return json.loads(path.read_text())


class DiffusionModelBase(abc.ABC):
    """Model-specific half of sampling and training; the same methods run in rollout and in training.

    An adapter holds only static facts read from the pipeline's component configs (VAE scale factor, latent
    channels, scheduler shift settings); the networks are passed to each call, so a training engine can hand in
    an FSDP2- or peft-wrapped transformer.
    """

    name: ClassVar[str] = ""
    pipeline_class_names: ClassVar[tuple[str, ...]] = ()
    cond_keys: ClassVar[tuple[str, ...]] = ()
    negative_cond_keys: ClassVar[tuple[str, ...]] = ()
    #: the longest prompt in text-encoder tokens the stock pipeline accepts (`None`: not checked by the adapter)
    max_prompt_tokens: ClassVar[int | None] = None
    #: the prompt encoder as `check_max_sequence_length` names it, e.g. "FLUX's T5"
    prompt_encoder: ClassVar[str] = "the text encoder"
    #: default of `actor_rollout_ref.model.fsdp_layer_prefixes`: the module lists whose children (the transformer
    #: blocks) the FSDP2 engine shards one by one; an explicit config value wins
    fsdp_layer_prefixes: ClassVar[tuple[str, ...]] = ("transformer_blocks.",)
    #: default of `actor.fsdp_config.cudnn_sdpa`: whether a training process may keep PyTorch's cuDNN backend of
    #: `scaled_dot_product_attention` (False: the engine turns it off, SDPA uses flash / memory-efficient attention)
    cudnn_sdpa_in_training: ClassVar[bool] = True

    def __init__(self, transformer_config: dict, vae_config: dict, scheduler_config: dict) -> None:
        self.transformer_config = dict(transformer_config)
        self.vae_config = dict(vae_config)
        self.scheduler_config = dict(scheduler_config)

    # ---- construction ----------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | pathlib.Path) -> DiffusionModelBase:
        """Read the component configs of a pipeline folder (no weights are loaded)."""
        root = pathlib.Path(path)
        return cls(
            _read_json(root / "transformer" / "config.json"),
            _read_json(root / "vae" / "config.json"),
            _read_json(root / "scheduler" / "scheduler_config.json"),
        )

    @classmethod
    def from_pipeline(cls, pipe: Any) -> DiffusionModelBase:
        """Take the component configs of a loaded pipeline."""
        return cls(dict(pipe.transformer.config), dict(pipe.vae.config), dict(pipe.scheduler.config))

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent cell along each spatial axis; each model that has a VAE defines it."""
        raise AttributeError(f"{type(self).__name__} defines no vae_scale_factor")

    def build_scheduler(self) -> FlowMatchSDEDiscreteScheduler:
        """A `FlowMatchSDEDiscreteScheduler` with this pipeline's schedule settings."""
        return FlowMatchSDEDiscreteScheduler.from_config(self.scheduler_config)

    # ---- the model-specific contract -----------------------------------------------------------------

    @abc.abstractmethod
    def latent_shape(self, height: int, width: int) -> tuple[int, ...]:
        """Per-sample latent shape (without the batch dim) for an image of `height` x `width` pixels."""

    @abc.abstractmethod
    def set_timesteps(
        self, scheduler: Any, num_inference_steps: int, height: int, width: int, device: Any = None
    ) -> None:
        """Set the scheduler's schedule exactly as the stock pipeline does for this resolution."""

    @abc.abstractmethod
    def encode_prompts(
        self,
        pipe: Any,
        prompts: list[str],
        *,
        negative_prompt: str | None,
        do_cfg: bool,
        max_sequence_length: int,
        device: Any,
    ) -> TensorDict:
        """Encode prompts (and the negative prompt when `do_cfg`) into a TensorDict of batch `len(prompts)`."""

    @abc.abstractmethod
    def velocity(
        self,
        transformer: Any,
        latents: torch.Tensor,
        timesteps: torch.Tensor,
        cond: TensorDict,
        *,
        guidance_scale: float,
        height: int,
        width: int,
        dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """Guided velocity `v` (float32, shape of `latents`) of `transformer` at `latents`, `timesteps` (B,)."""

    @abc.abstractmethod
    def decode(self, pipe: Any, latents: torch.Tensor, height: int, width: int) -> torch.Tensor:
        """Decode final latents to uint8 images `(B, 3, height, width)`."""

    # ---- shared helpers -------------------------------------------------------------------------------------

    def check_max_sequence_length(self, max_sequence_length: int) -> None:
        """Refuse a prompt length the stock pipeline refuses (above `max_prompt_tokens`).

        Raises:
            ValueError: `max_sequence_length` is above `max_prompt_tokens`; the message names the key to lower.
        """
        limit = self.max_prompt_tokens
        if limit is not None and max_sequence_length > limit:
            raise ValueError(
                f"max_sequence_length: {self.prompt_encoder} prompts take at most {limit} tokens, got "
                f"{max_sequence_length}; lower pipeline.max_sequence_length"
            )

    @staticmethod
    def prompt_batch(
        positive: dict[str, torch.Tensor], negative: dict[str, torch.Tensor] | None, batch_size: int, device: Any
    ) -> TensorDict:
        """The `encode_prompts` TensorDict of `batch_size` prompts.

        Args:
            positive (`dict[str, torch.Tensor]`): the prompts' embeddings under their `cond_keys`.
            negative (`dict[str, torch.Tensor]`, *optional*): with CFG, the negative prompt's embeddings under the
                same keys; stored as `negative_<key>` (the `negative_cond_keys`), after the positive ones.
            batch_size (`int`): `len(prompts)`.
            device (`torch.device` or `str`): the TensorDict's device.
        """
        out = dict(positive)
        if negative is not None:
            out.update({f"negative_{key}": value for key, value in negative.items()})
        return TensorDict(out, batch_size=[batch_size], device=device)

    def prepare_latents(
        self,
        batch_size: int,
        height: int,
        width: int,
        generator: torch.Generator | list[torch.Generator] | None,
        device: Any,
    ) -> torch.Tensor:
        """Initial noise, float32, shape `(batch_size, *latent_shape)`; one generator per row when a list."""
        from diffusers.utils.torch_utils import randn_tensor

        if isinstance(generator, list) and len(generator) != batch_size:
            raise ValueError(f"generator: {len(generator)} generators for a batch of {batch_size} rows")
        noise = randn_tensor(self._noise_shape(batch_size, height, width), generator=generator, device=device,
                             dtype=torch.float32)  # fmt: skip
        return self._noise_to_latents(noise, height, width)

    def _noise_shape(self, batch_size: int, height: int, width: int) -> tuple[int, ...]:
        return (batch_size, *self.latent_shape(height, width))

    def _noise_to_latents(self, noise: torch.Tensor, height: int, width: int) -> torch.Tensor:
        return noise

    def check_latents(self, latents: torch.Tensor, height: int, width: int, key: str = "latents") -> None:
        """Raise `ValueError` naming `key` unless `latents` is `(B, *latent_shape(height, width))`."""
        want = self.latent_shape(height, width)
        if latents.dim() != len(want) + 1 or tuple(latents.shape[1:]) != want:
            raise ValueError(
                f"{key}: expected shape (B, {', '.join(map(str, want))}) for a {height}x{width} image with "
                f"{self.name}, got {tuple(latents.shape)}"
            )

    def conditioning(self, batch: TensorDict) -> TensorDict:
        """Select the conditioning keys (negative ones only when present) from a trajectory batch."""
        present = set(batch.keys())
        keys = [k for k in (*self.cond_keys, *self.negative_cond_keys) if k in present]
        return batch.select(*keys)

    @staticmethod
    def module_dtype(module: Any) -> torch.dtype:
        """The dtype of the first floating-point parameter of `module` (float32 when it has none)."""
        for p in module.parameters():
            if p.is_floating_point():
                return p.dtype
        return torch.float32

    def score_step(
        self,
        transformer: Any,
        scheduler: FlowMatchSDEDiscreteScheduler,
        trajectory: TensorDict,
        j: int,
        *,
        sde_type: str | None = None,
        cps_logprob: str | None = None,
        noise_level: float | None = None,
        guidance_scale: float | None = None,
        dtype: torch.dtype | None = None,
    ) -> FlowMatchSDESchedulerOutput:
        """Recompute the log-prob of window step `j` of `trajectory` under `transformer` (the training path).

        Runs `velocity` (gradients flow through it) and `scheduler.step(..., prev_sample=latents[:, j + 1],
        step_index=step_indices[:, j])`, i.e. exactly the computation of the sampling loop. Every setting that
        changes the transition density (`sde_type`, `cps_logprob`, `noise_level`, `guidance_scale`, the schedule)
        is read from the trajectory; an explicit argument is only checked against the stored value.

        Args:
            transformer: the denoiser (plain, FSDP2 or peft wrapped), called like the diffusers transformer.
            scheduler (`FlowMatchSDEDiscreteScheduler`): its schedule is (re)set from the trajectory.
            trajectory (`TensorDict`): the layout written by the log-prob pipelines (docs/omni/sampling.md).
            j (`int`): position in the stored window, `0 <= j < K`.
            sde_type (`str`, *optional*): must equal the trajectory's `sde_type` when given.
            cps_logprob (`str`, *optional*): must equal the trajectory's `cps_logprob` when given.
            noise_level (`float`, *optional*): must equal the trajectory's `noise_level` when given.
            guidance_scale (`float`, *optional*): must equal the trajectory's `guidance_scale` when given.
            dtype (*optional*): dtype the transformer inputs are cast to (defaults to its parameters' dtype).

        Returns:
            [`FlowMatchSDESchedulerOutput`] with `log_prob` `(B,)` float32.

        Raises:
            KeyError: the trajectory lacks a sampler setting (`sde_type`, `cps_logprob`, `noise_level`, ...).
            ValueError: `j` outside the window; rows of the batch with different resolutions, step counts or
                sampler settings; an explicit argument that disagrees with the stored value (names the field and
                both values); a schedule that does not match the stored sigmas; or a deterministic step (noise
                level 0, or a cps step onto `σ' = 0`), which has no log-prob.
        """
        k = trajectory["log_probs"].shape[1]
        if not 0 <= j < k:
            raise ValueError(f"j: expected a window position in [0, {k - 1}], got {j}")
        height, width, steps = (int(_uniform(trajectory, key)) for key in ("height", "width", "num_inference_steps"))
        a = _stored_number(trajectory, "noise_level", noise_level)
        w = _stored_number(trajectory, "guidance_scale", guidance_scale)
        kind = _stored_setting(trajectory, "sde_type", sde_type)
        mode = _stored_setting(trajectory, "cps_logprob", cps_logprob)
        latents = trajectory["latents"]
        x, x_next = latents[:, j], latents[:, j + 1]
        idx = trajectory["step_indices"][:, j]
        timesteps = trajectory["timesteps"][:, j]
        self.set_timesteps(scheduler, steps, height, width, device=x.device)
        sig = scheduler.sigmas.to(x.device)[idx.to(x.device)]
        if not torch.allclose(sig, trajectory["sigmas"][:, j].to(sig), atol=1e-6, rtol=0):
            raise ValueError("trajectory: stored sigmas differ from the rebuilt schedule (sampled with another config)")
        v = self.velocity(
            transformer, x, timesteps, self.conditioning(trajectory), guidance_scale=w, height=height,
            width=width, dtype=dtype,
        )  # fmt: skip
        out = scheduler.step(
            v, timesteps, x, noise_level=a, sde_type=kind, prev_sample=x_next, step_index=idx,
            cps_logprob=mode,
        )  # fmt: skip
        if out.log_prob is None:
            raise ValueError(
                f"noise_level: window step {j} of the trajectory is deterministic (noise_level={a}, sde_type="
                f"{kind!r}); it has no log-prob, sample with noise_level > 0 inside the SDE window"
            )
        return out


def _uniform(trajectory: TensorDict, key: str) -> float:
    """The value of the per-row scalar `key`, which every row must share."""
    if key not in trajectory:
        raise KeyError(
            f"trajectory[{key!r}]: missing; the trajectory must record the sampler setting its log-probs were drawn "
            "with (written by the log-prob pipelines, docs/omni/sampling.md); resample it with this version"
        )
    values = trajectory[key]
    first = values[0].item()
    if bool((values != first).any()):
        raise ValueError(f"trajectory[{key!r}]: rows differ ({values.tolist()}); score one {key} per batch")
    return first


def _stored_number(trajectory: TensorDict, key: str, explicit: float | None) -> float:
    """The stored per-batch value of `key`; an explicit value must equal it (compared in the stored dtype)."""
    stored = _uniform(trajectory, key)
    if explicit is not None:
        as_stored = torch.tensor(float(explicit), dtype=trajectory[key].dtype).item()
        if as_stored != stored:
            raise ValueError(
                f"{key}: the caller passed {explicit!r} but the trajectory was sampled with {stored!r}; "
                f"omit {key} to score with the stored value"
            )
    return stored


def _stored_setting(trajectory: TensorDict, key: str, explicit: str | None) -> str:
    """The stored per-batch string setting `key` (decoded from its int64 code); an explicit value must equal it."""
    stored = setting_name(key, int(_uniform(trajectory, key)))
    if explicit is not None and explicit != stored:
        raise ValueError(
            f"{key}: the caller passed {explicit!r} but the trajectory was sampled with {stored!r}; "
            f"omit {key} to score with the stored value"
        )
    return stored
