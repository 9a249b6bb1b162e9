"""Training engine: `DiffusersFSDPEngine` (FSDP2, LoRA, log-prob recompute, FlowGRPO update, DCP checkpoints)."""

from verl_omni.engine import clean_update, pair_update, transition_update  # noqa: F401 - they register their updates
from verl_omni.engine.fsdp_engine import DiffusersFSDPEngine
from verl_omni.engine.lora import LoRABindingError, count_lora_modules

__all__ = ["DiffusersFSDPEngine", "LoRABindingError", "count_lora_modules"]
