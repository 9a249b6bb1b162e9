"""`actor_rollout_ref.model.*` keys that the training engine reads: the denoiser folder, LoRA and checkpointing.

The rollout-side subtrees `model.pipeline` and `model.algo` belong to the rollout config and are not part
of this class.
"""

from __future__ import annotations

import dataclasses

from verl_core.config import BaseConfig

__all__ = ["ALGORITHMS", "DiffusionModelConfig"]

#: values of `actor_rollout_ref.model.algorithm` (upstream's names; each is also a registered `loss_mode`)
ALGORITHMS = ("flow_grpo", "diffusion_nft", "dpo", "mix_grpo", "dance_grpo")


@dataclasses.dataclass
class DiffusionModelConfig(BaseConfig):
    """The denoiser and how it is trained (full weights or a LoRA adapter).

    Args:
        path (`str`): diffusers pipeline folder (`model_index.json` at its root).
        algorithm (`str`): training algorithm, one of `ALGORITHMS` (`"flow_grpo"`, `"diffusion_nft"`, `"dpo"`, and
            upstream's `"mix_grpo"` / `"dance_grpo"`: FlowGRPO's loss and advantages under their names, checked
            against their sampler keys by the trainer config); the shipped YAML makes it the default of
            `algorithm.adv_estimator` and `actor.diffusion_loss.loss_mode`.
        transformer_subfolder (`str`): subfolder of the denoiser inside `path`.
        enable_gradient_checkpointing (`bool`): activation checkpointing of each transformer block.
        attn_backend (`str`, *optional*): diffusers attention backend name (`set_attention_backend`), e.g.
            `"native"` or `"flash"`; null keeps the model's default (PyTorch SDPA).
        lora_rank (`int`): LoRA rank; 0 = full fine-tuning.
        lora_alpha (`int`): LoRA alpha (scale = alpha / rank).
        lora_init_weights (`str` or `bool`): peft `init_lora_weights` (`"gaussian"`, `true`, `"pissa"`, ...).
        target_modules (`str` or `list[str]`): peft target modules (`"all-linear"` or module-name suffixes).
        exclude_modules (`str` or `list[str]`, *optional*): peft modules to leave out.
        lora_adapter_path (`str`, *optional*): folder of a saved PEFT adapter to start from.
        fsdp_layer_prefixes (`list[str]`, *optional*): name prefixes of the module lists whose children are
            sharded one by one with `fully_shard` (the transformer blocks); null (default) takes the model
            adapter's default (`[transformer_blocks.]` for Qwen-Image and SD3, `[transformer_blocks.,
            single_transformer_blocks.]` for FLUX, `[blocks.]` for Wan).
    """

    path: str = ""
    algorithm: str = "flow_grpo"
    transformer_subfolder: str = "transformer"
    enable_gradient_checkpointing: bool = True
    attn_backend: str | None = None
    lora_rank: int = 0
    lora_alpha: int = 64
    lora_init_weights: str | bool = "gaussian"
    target_modules: str | list[str] = "all-linear"
    exclude_modules: str | list[str] | None = None
    lora_adapter_path: str | None = None
    fsdp_layer_prefixes: list[str] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(
            "algorithm",
            self.algorithm in ALGORITHMS,
            f"one of {', '.join(ALGORITHMS)} (it is the default of algorithm.adv_estimator and "
            "actor.diffusion_loss.loss_mode)",
        )
        self._require("lora_rank", self.lora_rank >= 0, "an int >= 0 (0 = full fine-tuning)")
        self._require("lora_alpha", self.lora_alpha > 0, "an int > 0")
        self._require(
            "target_modules",
            bool(self.target_modules),
            "a non-empty string such as 'all-linear' or a non-empty list of module names",
        )
        self._require(
            "fsdp_layer_prefixes",
            self.fsdp_layer_prefixes is None or all(p.endswith(".") for p in self.fsdp_layer_prefixes),
            "null (the model's default) or a list of module-name prefixes ending in '.', such as ['blocks.']",
        )

    @property
    def use_lora(self) -> bool:
        """True when a LoRA adapter is trained (`lora_rank > 0` or an adapter path is given)."""
        return self.lora_rank > 0 or self.lora_adapter_path is not None
