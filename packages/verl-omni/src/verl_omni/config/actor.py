"""Actor-side configs of the diffusion trainer: `actor_rollout_ref.actor.*` and `actor_rollout_ref.ref.*`.

Key names follow verl-omni's `diffusion_trainer` schema (flat list in ref/legacy_keys/). Keys of features this
project does not implement (profiler, rollout correction, distillation, DPO/NFT loss modes) are not accepted.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Literal

from verl_core.config import BaseConfig

__all__ = [
    "CheckpointConfig",
    "DiffusionActorConfig",
    "DiffusionLossConfig",
    "DiffusionRefConfig",
    "FSDPEngineConfig",
    "OptimConfig",
    "WrapPolicyConfig",
    "torch_dtype_name",
]

_DTYPE_ALIASES = {
    "fp32": "float32",
    "float32": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
}


def torch_dtype_name(name: str) -> str:
    """Canonical torch dtype name (`float32`, `bfloat16`, `float16`) of a config dtype string such as `bf16`."""
    try:
        return _DTYPE_ALIASES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(_DTYPE_ALIASES)}") from None


@dataclasses.dataclass
class OptimConfig(BaseConfig):
    """`actor.optim.*`: AdamW and its learning-rate schedule.

    Args:
        optimizer (`str`): only `"AdamW"`.
        optimizer_impl (`str`): only `"torch.optim"`.
        lr (`float`): peak learning rate.
        betas (`list[float]`): AdamW betas, two floats in [0, 1).
        weight_decay (`float`): decoupled weight decay.
        eps (`float`): AdamW epsilon.
        clip_grad (`float`): max global grad norm before each optimizer step (> 0).
        lr_warmup_steps (`int`): linear warm-up steps; -1 uses `lr_warmup_steps_ratio · total_training_steps`.
        lr_warmup_steps_ratio (`float`): see above, in [0, 1].
        total_training_steps (`int`): needed by `cosine` and by the warm-up ratio; -1 = unknown.
        lr_scheduler_type (`str`): `"constant"` (after warm-up) or `"cosine"` (decay to `min_lr_ratio · lr`).
        min_lr_ratio (`float`): floor of the cosine schedule, in [0, 1].
        num_cycles (`float`): cosine cycles over the run (0.5 = half a cosine, decaying once).
        zero_indexed_step (`bool`): the schedule's first step is 0 (True) or 1.
        warmup_style (`str`, *optional*): old name of `lr_scheduler_type`; must be null or equal to it.
        override_optimizer_config (`dict`, *optional*): extra keyword arguments for the optimizer constructor.
    """

    optimizer: Literal["AdamW"] = "AdamW"
    optimizer_impl: Literal["torch.optim"] = "torch.optim"
    lr: float = 1e-6
    betas: list[float] = dataclasses.field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.01
    eps: float = 1e-8
    clip_grad: float = 1.0
    lr_warmup_steps: int = -1
    lr_warmup_steps_ratio: float = 0.0
    total_training_steps: int = -1
    lr_scheduler_type: Literal["constant", "cosine"] = "constant"
    min_lr_ratio: float = 0.0
    num_cycles: float = 0.5
    zero_indexed_step: bool = True
    warmup_style: str | None = None
    override_optimizer_config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("lr", self.lr >= 0, "a float >= 0")
        self._require("betas", len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "two floats in [0, 1)")
        self._require("weight_decay", self.weight_decay >= 0, "a float >= 0")
        self._require("eps", self.eps > 0, "a float > 0")
        self._require("clip_grad", self.clip_grad > 0, "a float > 0 (the max grad norm)")
        self._require("lr_warmup_steps", self.lr_warmup_steps >= -1, "an int >= 0, or -1 to use lr_warmup_steps_ratio")
        self._require("lr_warmup_steps_ratio", 0 <= self.lr_warmup_steps_ratio <= 1, "a float in [0, 1]")
        self._require("min_lr_ratio", 0 <= self.min_lr_ratio <= 1, "a float in [0, 1]")
        self._require(
            "warmup_style",
            self.warmup_style in (None, self.lr_scheduler_type),
            f"null or equal to lr_scheduler_type ({self.lr_scheduler_type!r}); it is the old name of that key",
        )
        self._require(
            "total_training_steps",
            self.lr_scheduler_type != "cosine" or self.total_training_steps > 0,
            "an int > 0 when lr_scheduler_type is 'cosine'",
        )


@dataclasses.dataclass
class WrapPolicyConfig(BaseConfig):
    """`fsdp_config.wrap_policy.*`: kept for schema compatibility; FSDP2 shards per transformer block."""

    min_num_params: int = 0


@dataclasses.dataclass
class FSDPEngineConfig(BaseConfig):
    """`actor.fsdp_config.*`: how `DiffusersFSDPEngine` shards, casts and offloads the denoiser.

    Args:
        strategy (`str`): `"fsdp2"`; `"fsdp"` is accepted and also runs FSDP2 (FSDP1 is not provided).
        dtype (`str`): compute (param) dtype of the mixed-precision policy, e.g. `bfloat16`.
        reduce_dtype (`str`): dtype of the gradient reduce-scatter (`float32`).
        model_dtype (`str`): dtype of the sharded master weights and optimizer state (`fp32`).
        param_offload (`bool`): keep params, grads and the optimizer step on the CPU (FSDP2 `CPUOffloadPolicy`).
        offload_policy (`bool`): same as `param_offload` (verl's FSDP2 name).
        optimizer_offload (`bool`): move AdamW state to the CPU between updates.
        reshard_after_forward (`bool`, *optional*): free gathered block params after forward (true, ZeRO-3) or keep
            them for the backward (false, ZeRO-2). null (default): chosen per rank before the first forward from the
            free device memory: false when the gathered model, one micro-batch's activations and the gradients take
            at most half of it on CUDA, else true; always true on the CPU (`verl_omni.engine.auto_settings`; the
            choice and its numbers are logged).
        compile_blocks (`bool`, *optional*): `torch.compile` each transformer block (`model.fsdp_layer_prefixes`)
            before sharding; the first steps pay the compile time. null (default): on when the engine's device is
            CUDA, off on the CPU, as the rollout's `engine_kwargs.diffusers.compile_blocks`. Not verl's
            `use_torch_compile` (an LLM entropy kernel).
        cudnn_sdpa (`bool`, *optional*): whether this engine's process may use PyTorch's cuDNN backend of
            `scaled_dot_product_attention`. false: the engine turns it off for its whole process
            (`torch.backends.cuda.enable_cudnn_sdp(False)`, before any block is compiled; SDPA then picks flash or
            memory-efficient attention) and logs it; true: leaves PyTorch's backend choice alone. null (default): the
            model adapter's `cudnn_sdpa_in_training` for a training engine (false for FLUX, whose backward fails in
            cuDNN's fused attention, pytorch/pytorch#134001), true for a forward-only (reference) engine. The
            rollout servers' processes are not touched.
        fsdp_size (`int`): shard group size; -1 = all ranks (only -1 or the world size are supported).
        forward_prefetch (`bool`): accepted for compatibility; FSDP2 prefetches one block by default.
        forward_only (`bool`): build no optimizer (reference / log-prob-only engine).
        seed (`int`): seed of the engine's RNG (LoRA init).
        full_determinism (`bool`): `torch.use_deterministic_algorithms(True)`.
        ulysses_sequence_parallel_size (`int`): only 1.
        use_orig_params (`bool`): FSDP1 key, ignored by FSDP2 (kept for schema compatibility).
    """

    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"
    dtype: str = "bfloat16"
    reduce_dtype: str = "float32"
    model_dtype: str = "fp32"
    param_offload: bool = False
    offload_policy: bool = False
    optimizer_offload: bool = False
    reshard_after_forward: bool | None = None
    compile_blocks: bool | None = None
    cudnn_sdpa: bool | None = None
    fsdp_size: int = -1
    forward_prefetch: bool = False
    forward_only: bool = False
    seed: int = 42
    full_determinism: bool = False
    ulysses_sequence_parallel_size: int = 1
    use_orig_params: bool = False
    wrap_policy: WrapPolicyConfig = dataclasses.field(default_factory=WrapPolicyConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("dtype", "reduce_dtype", "model_dtype"):
            self._require(key, getattr(self, key) in _DTYPE_ALIASES, f"one of {', '.join(_DTYPE_ALIASES)}")
        self._require("fsdp_size", self.fsdp_size == -1 or self.fsdp_size >= 1, "-1 (all ranks) or an int >= 1")
        self._require(
            "ulysses_sequence_parallel_size",
            self.ulysses_sequence_parallel_size == 1,
            "1 (sequence parallelism is not implemented by DiffusersFSDPEngine)",
        )

    @property
    def cpu_offload(self) -> bool:
        """True when params/grads/optimizer step live on the CPU (`param_offload` or `offload_policy`)."""
        return self.param_offload or self.offload_policy


@dataclasses.dataclass
class DiffusionLossConfig(BaseConfig):
    """`actor.diffusion_loss.*`: the policy loss (FlowGRPO's clipped surrogate, or another registered `loss_mode`).

    Args:
        loss_mode (`str`): a loss registered with `verl_omni.algos.register_loss` (checked against the registry by
            the trainer's config, `DiffusionTrainerConfig`, before any worker starts); `"flow_grpo"`, `"grpo_guard"`
            (FlowGRPO with GRPO-Guard's ratio normalisation and ÷|dt| step weighting; `sde` sampler only) and
            `"diffusion_nft"` (forward-process training on clean samples, no log-probs) are built in.
        clip_ratio (`float`): ε of the ratio clip (> 0; 1e-4 default, 1e-5 in the Qwen-Image recipes, 2e-6 in
            upstream's GRPO-Guard recipe, whose normalised ratio spreads much less).
        adv_clip_max (`float`): advantages are clipped to ±this (> 0).
        kl_type (`str`): `"historical"` (flow_grpo / verl: mean Δμ²/(2·std_dev_t²), reproduces the published β)
            or `"exact"` (mean-reduced exact Gaussian KL; for sde use β_exact = β_historical·h).
        mix_beta (`float`): DiffusionNFT's β (> 0): `v^± = v_old ± β·(v_θ − v_old)`; upstream's default 0.5
            (its Qwen-Image recipe 0.1; the NFT paper 1.0, 0.1 for OCR).
        ref_kl_coef (`float`): DiffusionNFT's coefficient of `mean (v_θ − v_ref)²` (>= 0; 0 = no reference
            forward); the reference is the model with the LoRA adapters disabled.
        adaptive_weight_min (`float`): DiffusionNFT's floor of the adaptive weights `mean |e^±|` (> 0).
        dpo_beta (`float`): online Diffusion-DPO's β (> 0) in `z = −(β/2)·(Δ_w − Δ_l)`; upstream's default 2000.0
            (its Qwen-Image recipe 100.0).
        kl_mask_threshold (`float`): Flow-DPPO's τ (>= 0): a sample-step whose old-to-new transition KL (element
            mean) reaches τ and that still moves along its advantage is dropped from the loss.
        add_kl_coefficient (`bool`): Flow-DPPO: divide the mean-square mean shift by 2s² (the exact KL; true) or by 2.
    """

    loss_mode: str = "flow_grpo"
    clip_ratio: float = 1e-4
    adv_clip_max: float = 5.0
    kl_type: Literal["historical", "exact"] = "historical"
    mix_beta: float = 0.5
    ref_kl_coef: float = 0.0
    adaptive_weight_min: float = 1e-5
    dpo_beta: float = 2000.0
    kl_mask_threshold: float = 1e-5
    add_kl_coefficient: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("loss_mode", bool(self.loss_mode), "a registered loss name")
        self._require("clip_ratio", self.clip_ratio > 0, "a float > 0")
        self._require("adv_clip_max", self.adv_clip_max > 0, "a float > 0")
        self._require("mix_beta", self.mix_beta > 0, "a float > 0")
        self._require("ref_kl_coef", self.ref_kl_coef >= 0, "a float >= 0")
        self._require("adaptive_weight_min", self.adaptive_weight_min > 0, "a float > 0")
        self._require("dpo_beta", self.dpo_beta > 0, "a float > 0")
        self._require("kl_mask_threshold", self.kl_mask_threshold >= 0, "a float >= 0")


@dataclasses.dataclass
class CheckpointConfig(BaseConfig):
    """`actor.checkpoint.*`: what a checkpoint holds (`model`, `optimizer`, `extra` = RNG, step, LR schedule)."""

    save_contents: list[Literal["model", "optimizer", "extra"]] = dataclasses.field(
        default_factory=lambda: ["model", "optimizer", "extra"]
    )
    load_contents: list[Literal["model", "optimizer", "extra"]] | None = None
    async_save: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("async_save", not self.async_save, "false (asynchronous checkpoint saving is not implemented)")

    @property
    def resolved_load_contents(self) -> list[str]:
        """`load_contents`, defaulting to `save_contents` (verl's `${.save_contents}`)."""
        return list(self.save_contents if self.load_contents is None else self.load_contents)


@dataclasses.dataclass
class DiffusionActorConfig(BaseConfig):
    """`actor_rollout_ref.actor.*`: the policy update of FlowGRPO on `DiffusersFSDPEngine`.

    Args:
        strategy (`str`): `"fsdp2"` (or `"fsdp"`, which also runs FSDP2).
        rollout_n (`int`, *optional*): images per prompt (the group size); mini-batches are counted in prompts.
            Null (the default) follows `actor_rollout_ref.rollout.n`, the one home of the group size: the trainer
            config fills it and refuses a different value. A standalone engine needs it set.
        ppo_mini_batch_size (`int`): prompts per optimizer step (× `rollout_n` images, over all ranks).
        ppo_micro_batch_size_per_gpu (`int`, *optional*): images per forward/backward on one rank;
            null = the whole local mini-batch.
        log_prob_micro_batch_size_per_gpu (`int`, *optional*): images per forward in log-prob recompute;
            null = `ppo_micro_batch_size_per_gpu`.
        ppo_epochs (`int`): passes over each batch.
        shuffle (`bool`): shuffle samples before splitting into mini-batches.
        data_loader_seed (`int`): seed of that shuffle.
        use_kl_loss (`bool`): add `kl_loss_coef · KL(π_θ ‖ π_ref)` (needs `ref_prev_sample_mean` in the batch).
        kl_loss_coef (`float`): β.
        grad_clip (`float`): max grad norm; must equal `optim.clip_grad` (two names of one knob in verl).
        loss_scale_factor (`float`, *optional*): multiply the loss by this constant (null = 1).
        diffusion_loss, optim, fsdp_config, checkpoint: nested configs.

    Raises:
        ConfigValueError: `grad_clip` and `optim.clip_grad` differ (set both to the same value), or a size < 1.
    """

    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"
    rollout_n: int | None = None
    ppo_mini_batch_size: int = 256
    ppo_micro_batch_size_per_gpu: int | None = None
    log_prob_micro_batch_size_per_gpu: int | None = None
    ppo_epochs: int = 1
    shuffle: bool = False
    data_loader_seed: int = 42
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    grad_clip: float = 1.0
    loss_scale_factor: float | None = None
    diffusion_loss: DiffusionLossConfig = dataclasses.field(default_factory=DiffusionLossConfig)
    optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
    fsdp_config: FSDPEngineConfig = dataclasses.field(default_factory=FSDPEngineConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)

    _POSITIVE: ClassVar[tuple[str, ...]] = ("ppo_mini_batch_size", "ppo_epochs")

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in self._POSITIVE:
            self._require(key, getattr(self, key) >= 1, "an int >= 1")
        for key in ("rollout_n", "ppo_micro_batch_size_per_gpu", "log_prob_micro_batch_size_per_gpu"):
            value = getattr(self, key)
            self._require(key, value is None or value >= 1, "null or an int >= 1")
        self._require("kl_loss_coef", self.kl_loss_coef >= 0, "a float >= 0")
        self._require(
            "grad_clip",
            self.grad_clip == self.optim.clip_grad,
            f"the same value as optim.clip_grad ({self.optim.clip_grad}); set both keys to one max grad norm",
        )
        self._require("loss_scale_factor", self.loss_scale_factor is None or self.loss_scale_factor > 0, "null or > 0")


@dataclasses.dataclass
class DiffusionRefConfig(BaseConfig):
    """`actor_rollout_ref.ref.*`: the frozen reference policy (only used for the KL term).

    `rollout_n` is null by default and follows `actor_rollout_ref.rollout.n` (see `DiffusionActorConfig`).
    """

    strategy: Literal["fsdp", "fsdp2"] = "fsdp2"
    rollout_n: int | None = None
    log_prob_micro_batch_size_per_gpu: int | None = None
    fsdp_config: FSDPEngineConfig = dataclasses.field(default_factory=lambda: FSDPEngineConfig(forward_only=True))

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("rollout_n", self.rollout_n is None or self.rollout_n >= 1, "null or an int >= 1")
        self._require(
            "log_prob_micro_batch_size_per_gpu",
            self.log_prob_micro_batch_size_per_gpu is None or self.log_prob_micro_batch_size_per_gpu >= 1,
            "null or an int >= 1",
        )
