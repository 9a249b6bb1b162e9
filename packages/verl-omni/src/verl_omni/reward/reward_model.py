"""`reward.reward_model.*`: a generative reward model served by verl-core rollout servers, and how functions reach it.

Key names and meanings follow verl-omni's `diffusion_trainer` schema (ref/legacy_keys): `enable`, `model_path`,
`enable_resource_pool` (false: the servers are colocated with the actor ranks, sleeping outside the reward phase;
true: their own pool of `nnodes` x `n_gpus_per_node` devices), and `rollout.*` (`name` picks the verl-core backend,
`hf` or `vllm`; `tensor_model_parallel_size` devices per server; `gpu_memory_utilization`; `free_cache_engine`
puts colocated servers to sleep between reward phases; `prompt_length` / `response_length`; the sampling defaults).
The trainer starts the servers (`verl_omni.trainer.reward_model.RewardModelService`) behind one OpenAI-compatible
address; reward functions get it the way verl passes it: `reward_router_address` (`host:port`),
`reward_model_tokenizer` (the model's tokenizer) and `model_name` (the served name) as keyword arguments, each only
to functions that declare it (or take `**kwargs`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

from verl_core.config import BaseConfig

__all__ = [
    "REWARD_MODEL_ARGS",
    "RewardModelConfig",
    "RewardModelEndpoint",
    "RewardModelRolloutConfig",
]

REWARD_MODEL_ARGS = ("reward_router_address", "reward_model_tokenizer", "model_name")
"""Keyword arguments a reward function receives from an enabled reward model (verl's names)."""


@dataclasses.dataclass
class RewardModelRolloutConfig(BaseConfig):
    """`reward.reward_model.rollout.*`: the reward model's servers (a verl-core `RolloutConfig` is built from it).

    Args:
        name (`str`): verl-core rollout backend: `"hf"` (transformers, CPU or one GPU) or `"vllm"`.
        dtype (`str`): weight dtype (`bfloat16`/`bf16`, `float32`/`fp32`, `float16`/`fp16`).
        tensor_model_parallel_size (`int`): devices per server; the servers are `world / this` (colocated: one per
            `tensor_model_parallel_size` actor ranks, which must then be 1 on GPUs).
        gpu_memory_utilization (`float`): share of GPU memory the engine may take (vLLM).
        free_cache_engine (`bool`): colocated servers sleep outside the reward phase (wake before it, sleep after).
        enforce_eager (`bool`): no CUDA graphs (vLLM).
        max_model_len (`int`, *optional*): context length; null = the model's.
        max_num_seqs (`int`): engine batch size in sequences (vLLM).
        max_num_batched_tokens (`int`, *optional*): engine batch size in tokens (vLLM).
        enable_prefix_caching (`bool`): reuse KV of shared prefixes (vLLM).
        load_format (`str`): weight loading format (vLLM).
        engine_kwargs (`dict`): extra engine arguments, passed through.
        temperature, top_k, top_p (`float`, `int`, `float`): default sampling of requests that set none.
        prompt_length (`int`): longest prompt in tokens.
        response_length (`int`): default `max_tokens` of requests that set none.
        request_timeout_s (`float`): longest one chat request may take (a hung server is an error after it).
        lifecycle_timeout_s (`float`): longest sleep / wake_up may take.
        launch_timeout_s (`float`): longest server start-up may take.

    Raises:
        ConfigValueError: a value out of range (names the key).
    """

    name: str = "hf"
    dtype: str = "bfloat16"
    tensor_model_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    free_cache_engine: bool = True
    enforce_eager: bool = True
    max_model_len: int | None = None
    max_num_seqs: int = 1024
    max_num_batched_tokens: int | None = 8192
    enable_prefix_caching: bool = True
    load_format: str = "auto"
    engine_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    prompt_length: int = 2048
    response_length: int = 2048
    request_timeout_s: float = 300.0
    lifecycle_timeout_s: float = 120.0
    launch_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        super().__post_init__()
        from verl_omni.config.actor import torch_dtype_name

        self._require("name", bool(self.name), "a verl-core rollout backend such as 'hf' or 'vllm'")
        try:
            torch_dtype_name(self.dtype)
        except ValueError:
            self._require("dtype", False, "one of bfloat16/bf16, float32/fp32, float16/fp16")
        self._require("tensor_model_parallel_size", self.tensor_model_parallel_size >= 1, "an int >= 1")
        self._require("gpu_memory_utilization", 0 < self.gpu_memory_utilization <= 1, "a float in (0, 1]")
        self._require("prompt_length", self.prompt_length >= 1, "an int >= 1")
        self._require("response_length", self.response_length >= 1, "an int >= 1")
        for key in ("request_timeout_s", "lifecycle_timeout_s", "launch_timeout_s"):
            self._require(key, getattr(self, key) > 0, "a number of seconds > 0")


@dataclasses.dataclass
class RewardModelConfig(BaseConfig):
    """`reward.reward_model.*`: a generative reward model (a vision-language model answering OpenAI chat requests).

    Args:
        enable (`bool`): start the reward model servers and pass their address to the reward functions.
        model_path (`str`, *optional*): the model folder (or hub id the backend may download); required when enabled.
        enable_resource_pool (`bool`): false (default): one server per `rollout.tensor_model_parallel_size` actor
            ranks, in the actor's bundles, sleeping outside the reward phase; true: a pool of its own.
        n_gpus_per_node (`int`): devices per node of the own pool (`enable_resource_pool: true`).
        nnodes (`int`): nodes of the own pool.
        rollout (`RewardModelRolloutConfig`): the servers.

    Raises:
        ConfigValueError: `enable` without `model_path`, or an own pool (`enable_resource_pool`) of fewer devices
            than one server needs.
    """

    enable: bool = False
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 8
    nnodes: int = 0
    model_path: str | None = None
    rollout: RewardModelRolloutConfig = dataclasses.field(default_factory=RewardModelRolloutConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.enable:
            return
        self._require("model_path", bool(self.model_path), "a model folder (a vision-language model) with enable=true")
        if self.enable_resource_pool:
            self._require("nnodes", self.nnodes >= 1, "an int >= 1 with enable_resource_pool=true")
            self._require("n_gpus_per_node", self.n_gpus_per_node >= 1, "an int >= 1 with enable_resource_pool=true")
            tp = self.rollout.tensor_model_parallel_size
            self._require(
                "n_gpus_per_node",
                (self.n_gpus_per_node * self.nnodes) % tp == 0,
                f"nnodes x n_gpus_per_node a multiple of rollout.tensor_model_parallel_size ({tp})",
            )

    @property
    def colocated(self) -> bool:
        """True when enabled and sharing the actor's bundles (`enable_resource_pool: false`)."""
        return self.enable and not self.enable_resource_pool

    def server_config(self, device: str) -> Any:
        """The verl-core `RolloutConfig` of each server, on `device` (`"cpu"` or `"cuda"`)."""
        from verl_core.config import RolloutConfig
        from verl_core.config.rollout import ModelConfig, SamplingConfig
        from verl_omni.config.actor import torch_dtype_name

        r = self.rollout
        return RolloutConfig(
            model=ModelConfig(path=str(self.model_path), dtype=torch_dtype_name(r.dtype)),
            name=r.name,
            device=device,
            request_timeout_s=r.request_timeout_s,
            lifecycle_timeout_s=r.lifecycle_timeout_s,
            launch_timeout_s=r.launch_timeout_s,
            max_request_bytes=64 << 20,  # images travel inline as base64 data URLs
            max_prompt_len=r.prompt_length,
            tensor_model_parallel_size=r.tensor_model_parallel_size,
            gpu_memory_utilization=r.gpu_memory_utilization,
            max_model_len=r.max_model_len,
            max_num_seqs=r.max_num_seqs,
            max_num_batched_tokens=r.max_num_batched_tokens,
            enforce_eager=r.enforce_eager,
            enable_prefix_caching=r.enable_prefix_caching,
            load_format=r.load_format,
            engine_kwargs=dict(r.engine_kwargs),
            sampling=SamplingConfig(
                temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, max_tokens=r.response_length
            ),
        )


@dataclasses.dataclass(frozen=True)
class RewardModelEndpoint:
    """Where a running reward model answers, as reward functions receive it.

    Args:
        router_address (`str`): `host:port` of the OpenAI-compatible router (`reward_router_address`).
        model_name (`str`): the served model name (`model_name`; the chat requests' `model`).
        tokenizer_path (`str`): folder of the model's tokenizer (`reward_model_tokenizer` is loaded from it once per
            process, only for functions that take it).
    """

    router_address: str
    model_name: str
    tokenizer_path: str

    def kwargs_for(self, fn: Callable[..., Any]) -> dict[str, Any]:
        """The reward-model keyword arguments `fn` takes (by name, or all of them through `**kwargs`)."""
        params = inspect.signature(fn).parameters
        var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        wanted = [name for name in REWARD_MODEL_ARGS if var_kw or name in params]
        values = {"reward_router_address": self.router_address, "model_name": self.model_name}
        out = {name: values[name] for name in wanted if name in values}
        if "reward_model_tokenizer" in wanted:
            out["reward_model_tokenizer"] = _tokenizer(self.tokenizer_path)
        return out


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)
