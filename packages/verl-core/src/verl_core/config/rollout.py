"""Rollout configs: the common `RolloutBaseConfig`, the LLM `RolloutConfig` (alias `LLMRolloutConfig`), their parts.

The parts are `ModelConfig`, `SamplingConfig` (LLM only) and `LoRAConfig`. verl-omni's `DiffusionRolloutConfig`
derives from `RolloutBaseConfig`, beside `RolloutConfig`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from verl_core.config.base import BaseConfig

__all__ = ["LLMRolloutConfig", "LoRAConfig", "ModelConfig", "RolloutBaseConfig", "RolloutConfig", "SamplingConfig"]


@dataclasses.dataclass
class ModelConfig(BaseConfig):
    """The model a rollout server loads.

    Args:
        path (`str`):
            Local folder (or hub id, if the engine may download) of the model weights and config.
        tokenizer_path (`str`, *optional*):
            Tokenizer folder; defaults to `path`.
        dtype (`str`, *optional*, defaults to `"auto"`):
            Weight dtype: `"auto"` (what the checkpoint says), `"float32"`, `"bfloat16"` or `"float16"`.
        trust_remote_code (`bool`, *optional*, defaults to `False`):
            Allow model code from the checkpoint folder.
    """

    path: str
    tokenizer_path: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("path", bool(self.path), "a non-empty model folder or hub id")


@dataclasses.dataclass
class SamplingConfig(BaseConfig):
    """Default sampling parameters; a request's `sampling_params` override them key by key.

    Args:
        temperature (`float`, *optional*, defaults to `1.0`): 0 means greedy decoding.
        top_p (`float`, *optional*, defaults to `1.0`): nucleus mass in (0, 1].
        top_k (`int`, *optional*, defaults to `-1`): -1 disables top-k.
        max_tokens (`int`, *optional*, defaults to `64`): new tokens per response (>= 1).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 64

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("temperature", self.temperature >= 0, "float >= 0 (0 = greedy)")
        self._require("top_p", 0 < self.top_p <= 1, "float in (0, 1]")
        self._require("top_k", self.top_k == -1 or self.top_k >= 1, "-1 (disabled) or int >= 1")
        self._require("max_tokens", self.max_tokens >= 1, "int >= 1")


@dataclasses.dataclass
class LoRAConfig(BaseConfig):
    """LoRA serving limits; `rank == 0` disables LoRA.

    Args:
        rank (`int`, *optional*, defaults to `0`): the largest adapter rank the engine must hold.
        max_loras (`int`, *optional*, defaults to `1`): adapters resident at the same time.
    """

    rank: int = 0
    max_loras: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("rank", self.rank >= 0, "int >= 0 (0 disables LoRA)")
        self._require("max_loras", self.max_loras >= 1, "int >= 1")

    @property
    def enabled(self) -> bool:
        """Whether adapters are served at all."""
        return self.rank > 0


@dataclasses.dataclass
class RolloutBaseConfig(BaseConfig):
    """What every rollout server needs, whatever it generates: backend, model, binding, limits, weight sync, sleep.

    Also the timeouts and the engine resources. `RolloutConfig` (LLM) and verl-omni's `DiffusionRolloutConfig`
    derive from it side by side; neither carries the other's keys.

    Args:
        model (`ModelConfig`): the model to serve.
        name (`str`, *optional*, defaults to `"hf"`): backend name in `verl_core.rollout.registry`.
        host (`str`, *optional*, defaults to `"127.0.0.1"`): bind address; `"0.0.0.0"` exposes the server.
        port (`int`, *optional*, defaults to `0`): bind port; 0 picks a free one.
        device (`str`, *optional*, defaults to `"auto"`): embedded backends: `"auto"`, `"cpu"`, `"cuda"`, `"cuda:N"`.
        seed (`int`, *optional*, defaults to `0`): engine seed; server rank `r` uses `seed + r`.
        request_timeout_s (`float`, *optional*, defaults to `120.0`): longest one generate may take.
        lifecycle_timeout_s (`float`, *optional*, defaults to `120.0`): longest sleep, wake_up or abort may take.
        weight_sync_timeout_s (`float`, *optional*, defaults to `600.0`): longest one update_weights may take.
        launch_timeout_s (`float`, *optional*, defaults to `600.0`): longest engine start-up may take.
        max_request_bytes (`int`, *optional*, defaults to 1 MiB): largest JSON request body.
        max_bucket_bytes (`int`, *optional*, defaults to 2 GiB): largest weight bucket the server accepts.
        max_response_bytes (`int`, *optional*, defaults to 2 GiB): largest binary generate response (tensors)
            a server sends and a replica's clients accept.
        update_weights_bucket_bytes (`int`, *optional*, defaults to 256 MiB): bucket size senders use (>= 64).
        update_weights_transport (`str`, *optional*, defaults to `"auto"`): how senders push weights: `"auto"`
            shares GPU tensors by CUDA IPC (`/update_weights_cuda_ipc`) or writes host tensors once into a
            shared-memory segment (`/update_weights_shm`) for servers at a loopback address, and streams them over
            HTTP to the others; `"http"` streams to every server.
        max_concurrent_requests (`int`, *optional*, defaults to `1024`): generates in flight before 503.
        sleep_level (`int`, *optional*, defaults to `1`): 1 keeps weights in host memory, 2 drops them.
        tensor_model_parallel_size (`int`, *optional*, defaults to `1`): engine TP degree (vLLM family).
        gpu_memory_utilization (`float`, *optional*, defaults to `0.5`): share of GPU memory the engine may take.
        enforce_eager (`bool`, *optional*, defaults to `False`): disable CUDA graphs.
        load_format (`str`, *optional*, defaults to `"auto"`): `"dummy"` starts from random weights that the
            first `update_weights` replaces.
        engine_kwargs (`dict`, *optional*): extra engine arguments, passed through unchanged (they win).
        lora (`LoRAConfig`, *optional*): LoRA serving limits.
    """

    model: ModelConfig
    name: str = "hf"
    host: str = "127.0.0.1"
    port: int = 0
    device: str = "auto"
    seed: int = 0
    request_timeout_s: float = 120.0
    lifecycle_timeout_s: float = 120.0
    weight_sync_timeout_s: float = 600.0
    launch_timeout_s: float = 600.0
    max_request_bytes: int = 1 << 20
    max_bucket_bytes: int = 2 << 30
    max_response_bytes: int = 2 << 30
    update_weights_bucket_bytes: int = 256 << 20
    update_weights_transport: str = "auto"
    max_concurrent_requests: int = 1024
    sleep_level: int = 1
    tensor_model_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = False
    load_format: str = "auto"
    engine_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    lora: LoRAConfig = dataclasses.field(default_factory=LoRAConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("name", bool(self.name), "a registered backend name such as 'hf' or 'vllm'")
        self._require("port", 0 <= self.port <= 65535, "int in [0, 65535] (0 picks a free port)")
        for key in ("request_timeout_s", "lifecycle_timeout_s", "weight_sync_timeout_s", "launch_timeout_s"):
            self._require(key, getattr(self, key) > 0, "a timeout in seconds > 0")
        for key in ("max_request_bytes", "max_bucket_bytes", "max_response_bytes"):
            self._require(key, getattr(self, key) >= 1, "int >= 1")
        self._require(
            "update_weights_bucket_bytes",
            64 <= self.update_weights_bucket_bytes <= self.max_bucket_bytes,
            f"int in [64, max_bucket_bytes ({self.max_bucket_bytes})]",
        )
        self._require("update_weights_transport", self.update_weights_transport in ("auto", "http"), "'auto' or 'http'")
        self._require("max_concurrent_requests", self.max_concurrent_requests >= 1, "int >= 1")
        self._require("sleep_level", self.sleep_level in (1, 2), "1 (keep weights in host memory) or 2 (drop them)")
        self._require("tensor_model_parallel_size", self.tensor_model_parallel_size >= 1, "int >= 1")
        self._require("gpu_memory_utilization", 0 < self.gpu_memory_utilization <= 1, "float in (0, 1]")
        self._require("device", self.device == "auto" or self.device.split(":")[0] in ("cpu", "cuda"), _DEVICES)


@dataclasses.dataclass
class RolloutConfig(RolloutBaseConfig):
    """The LLM rollout (also `LLMRolloutConfig`): `RolloutBaseConfig` plus token limits, batch/KV knobs, sampling.

    Args:
        max_prompt_len (`int`, *optional*, defaults to `8192`): longest prompt in tokens.
        max_model_len (`int`, *optional*): engine context length; `None` = the model's.
        max_num_seqs (`int`, *optional*, defaults to `256`): engine batch size in sequences.
        max_num_batched_tokens (`int`, *optional*): engine batch size in tokens.
        enable_prefix_caching (`bool`, *optional*, defaults to `True`): reuse KV of shared prefixes.
        sampling (`SamplingConfig`, *optional*): default sampling parameters.

    The other keys are `RolloutBaseConfig`'s.
    """

    max_prompt_len: int = 8192
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool = True
    sampling: SamplingConfig = dataclasses.field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("max_prompt_len", self.max_prompt_len >= 1, "int >= 1")
        self._require("max_num_seqs", self.max_num_seqs >= 1, "int >= 1")


LLMRolloutConfig = RolloutConfig
"""The LLM rollout config; `RolloutConfig` is its public name (YAML `_target_`s and imports use it)."""

_DEVICES = "'auto', 'cpu', 'cuda' or 'cuda:N'"
