"""The vLLM family: `BaseVLLMHttpServer` (shared) and `vLLMHttpServer` (LLMs on AsyncLLM).

Importing this package never imports vllm; constructing a server without vllm raises an ImportError
that says `pip install "verl-core[vllm]"`.
"""

from verl_core.rollout.vllm.base import BaseVLLMHttpServer, free_port
from verl_core.rollout.vllm.engine_args import build_engine_args, round_up_lora_rank, sleep_level_for
from verl_core.rollout.vllm.llm import VLLMSamplingParams, vLLMHttpServer
from verl_core.rollout.vllm.lora_cache import LoRAEntry, LoRARequestCache

__all__ = [
    "BaseVLLMHttpServer",
    "LoRAEntry",
    "LoRARequestCache",
    "VLLMSamplingParams",
    "build_engine_args",
    "free_port",
    "round_up_lora_rank",
    "sleep_level_for",
    "vLLMHttpServer",
]
