"""`BaseVLLMHttpServer`: what every vLLM-family server shares (engine args, sleep, weight sync, LoRA, ports).

It holds no LLM-only and no diffusion-only logic: generation, sampling parameters, prompts and extra
routes belong to the subclasses (`vLLMHttpServer` here, `vLLMOmniHttpServer` in verl-omni).
"""

from __future__ import annotations

import abc
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

import torch

from verl_core.config.rollout import RolloutBaseConfig
from verl_core.rollout.errors import EngineError, WeightSyncError
from verl_core.rollout.net import bind_socket
from verl_core.rollout.server import RolloutHttpServer
from verl_core.rollout.vllm import _adapter
from verl_core.rollout.vllm.engine_args import build_engine_args, sleep_level_for
from verl_core.rollout.vllm.lora_cache import LoRAEntry, LoRARequestCache
from verl_core.rollout.vllm.worker_weights import pack_tensors, unpack_tensors
from verl_core.rollout.weights import WeightKind, WeightUpdate

__all__ = ["BaseVLLMHttpServer", "free_port"]

WORKER_EXTENSION = "verl_core.rollout.vllm.worker_extension.VerlWorkerExtension"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now."""
    sock = bind_socket(host, 0)
    try:
        return sock.getsockname()[1]
    finally:
        sock.close()


class BaseVLLMHttpServer(RolloutHttpServer):
    """Shared base of the vLLM family.

    - engine arguments from `RolloutConfig` (`engine_args()`; `rollout.engine_kwargs[engine_kwargs_key]` wins),
    - sleep levels (`sleep_level_for`: level 1 when serving LoRA over checkpoint weights),
    - weight sync through the engine's `collective_rpc` into the worker extension's `load_weights_rpc` method
      (one bytes payload per bucket; each tensor a worker refuses is a `WeightSyncError` naming it), and the
      served-weights read-back through `read_weights_rpc` (the model's own loader locates fused tensors),
    - LoRA adapters loaded per weight version with a fresh id (`LoRARequestCache`), older ones unloaded,
    - a distinct `VLLM_PORT` per server process.

    Subclasses implement `_create_engine`, `_engine_generate` and `_validate_sampling_params`, and may set
    `engine_kwargs_key` and `backend_module` (the optional package to require at construction).

    Raises:
        ImportError: the backend package is not installed; the message says how to install it.
    """

    engine_kwargs_key: ClassVar[str] = "vllm"
    backend_module: ClassVar[str] = "vllm"
    load_weights_rpc: ClassVar[str] = "verl_load_weights"
    """Worker-extension method taking one `pack_tensors` payload, answering `{"loaded", "errors"}`."""
    read_weights_rpc: ClassVar[str] = "verl_read_weights"
    """Worker-extension method taking tensor names, answering a `pack_tensors` payload of their served values."""
    readable_weight_kinds: ClassVar[tuple[WeightKind, ...]] = ("full",)  # LoRA tensors live in vLLM's LoRA manager

    def __init__(self, config: RolloutBaseConfig, *, rank: int = 0) -> None:
        self._require_backend()
        super().__init__(config, rank=rank)
        self._engine: Any = None
        self._engine_args: dict[str, Any] | None = None
        self._lora_cache = LoRARequestCache(config.lora.max_loras)
        self._lora_pending: dict[str, torch.Tensor] = {}
        self._lora_dirs: dict[int, Path] = {}

    # ---- family hooks ---------------------------------------------------------------------------

    def _require_backend(self) -> None:
        """Raise ImportError with install instructions when `backend_module` is missing."""
        if self.backend_module == "vllm":
            _adapter.require_vllm(type(self).__name__)

    @abc.abstractmethod
    async def _create_engine(self, engine_args: dict[str, Any]) -> Any:
        """Build the engine from the engine-argument dict (runs on the server loop)."""

    def _worker_extension_cls(self) -> str | None:
        """Qualified name of the worker extension class that receives weights."""
        return WORKER_EXTENSION

    def engine_args(self) -> dict[str, Any]:
        """The engine arguments this server starts its engine with."""
        return build_engine_args(
            self.config,
            rank=self.rank,
            worker_extension_cls=self._worker_extension_cls(),
            engine_kwargs_key=self.engine_kwargs_key,
        )

    def _default_sleep_level(self) -> int:
        return sleep_level_for(self.config, None)

    async def _rpc(self, method: str, **kwargs: Any) -> Any:
        """Call `method` on every engine worker (the worker extension's methods)."""
        return await self._engine.collective_rpc(method, timeout=self.config.weight_sync_timeout_s, kwargs=kwargs)

    def _current_lora_request(self) -> Any:
        """The engine LoRA request generates should use (None without adapters)."""
        entry = self._lora_cache.current()
        return entry.request if entry is not None else None

    # ---- engine hooks ---------------------------------------------------------------------------

    async def _engine_load(self) -> None:
        os.environ.setdefault("VLLM_PORT", str(free_port()))
        self._engine_args = self.engine_args()
        self._engine = await self._create_engine(self._engine_args)

    async def _engine_abort(self, request_ids: list[str]) -> None:
        await self._engine.abort(request_ids)

    async def _engine_sleep(self, level: int) -> None:
        await self._engine.reset_prefix_cache()
        await self._engine.sleep(level)

    async def _engine_wake_up(self, tags: list[str]) -> None:
        await self._engine.wake_up(tags)

    async def _engine_begin_weights(self, update: WeightUpdate) -> None:
        if update.kind == "full":
            return  # the model's load_weights checks names; vLLM's names differ from the trainer's
        if not self.config.lora.enabled:
            raise WeightSyncError(
                "LoRA weights sent but rollout.lora.rank is 0 (LoRA serving disabled); set rollout.lora.rank",
                field="peft_config",
            )
        rank = (update.peft_config or {}).get("r")
        if not isinstance(rank, int) or not 1 <= rank <= self.config.lora.rank:
            raise WeightSyncError(
                f"peft_config.r must be an int in [1, rollout.lora.rank={self.config.lora.rank}], got {rank!r}",
                field="peft_config.r",
            )
        self._lora_pending = {}

    async def _engine_load_bucket(self, update: WeightUpdate, tensors: list[tuple[str, torch.Tensor]]) -> None:
        if update.kind == "lora":
            self._lora_pending.update((name, t.clone()) for name, t in tensors)
            return
        replies = await self._worker_replies(self.load_weights_rpc, payload=pack_tensors(tensors))
        errors = [e for reply in replies for e in reply.get("errors", ())]
        if errors:
            first = errors[0]
            more = f" (and {len(errors) - 1} more: {sorted({e['name'] for e in errors[1:]})[:5]})" if errors[1:] else ""
            raise WeightSyncError(f"tensor {first['name']!r} was refused by the engine: {first['message']}{more}",
                                  field=first["name"])  # fmt: skip

    async def _engine_read_weights(self, names: list[str], kind: WeightKind) -> dict[str, torch.Tensor]:
        if kind != "full":
            raise KeyError(f"{type(self).__name__} reads back full weights only; LoRA adapters are served by vLLM's "
                           "LoRA manager from the tensors it was sent")  # fmt: skip
        replies = await self._worker_replies(self.read_weights_rpc, names=list(names))
        failed = [r["error"] for r in replies if r.get("error")]
        if failed:
            raise KeyError(failed[0])
        return dict(unpack_tensors(replies[0]["payload"]))  # tensor_parallel_size=1: one worker holds every tensor

    async def _worker_replies(self, method: str, **kwargs: Any) -> list[dict[str, Any]]:
        """`_rpc(method)`'s answers, one dict per worker (the worker extension's methods answer dicts).

        Engines nest the answers (vLLM: one per worker; vLLM-Omni: per stage, then per worker) and vLLM-Omni answers a
        failed worker call with an error record instead of raising: both are flattened here, and a record that is not
        the method's own answer raises.

        Raises:
            EngineError: a worker's call failed (names the method and the engine's message).
        """
        replies = _flatten_replies(await self._rpc(method, **kwargs))
        bad = [r for r in replies if not isinstance(r, dict) or r.get("status") == "error" or "todo" in r]
        if bad or not replies:
            raise EngineError(f"worker call {method} failed: {bad[0] if bad else 'no worker answered'}")
        return replies

    async def _engine_finish_weights(self, update: WeightUpdate) -> None:
        if update.kind == "full":
            await self._engine.reset_prefix_cache()
            return
        int_id, name = self._lora_cache.new_id(update.version)
        folder = self._write_adapter(int_id, update.peft_config or {}, self._lora_pending)
        self._lora_pending = {}
        request = _adapter.lora_request(name, int_id, str(folder))
        await self._engine.add_lora(request)
        for old in self._lora_cache.add(LoRAEntry(int_id, name, update.version, request)):
            await self._engine.remove_lora(old.int_id)
            shutil.rmtree(self._lora_dirs.pop(old.int_id, ""), ignore_errors=True)

    async def _engine_abort_weights(self, update: WeightUpdate) -> None:
        self._lora_pending = {}

    async def _engine_shutdown(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.shutdown()
        for folder in self._lora_dirs.values():
            shutil.rmtree(folder, ignore_errors=True)
        self._lora_dirs.clear()
        self._lora_cache.clear()

    def _engine_metrics(self) -> dict[str, Any]:
        entry = self._lora_cache.current()
        return {"lora_adapters": len(self._lora_cache), "lora_version": entry.version if entry else None}

    def _write_adapter(self, int_id: int, peft_config: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Path:
        from safetensors.torch import save_file

        folder = Path(tempfile.mkdtemp(prefix=f"verl-lora-{self.rank}-{int_id}-"))
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "adapter_model.safetensors"))
        (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", **peft_config}))
        self._lora_dirs[int_id] = folder
        return folder


def _flatten_replies(replies: Any) -> list[Any]:
    """The leaves of a `collective_rpc` answer: a bare value, a list per worker, or lists per stage of those."""
    if isinstance(replies, (list, tuple)):
        return [leaf for item in replies for leaf in _flatten_replies(item)]
    return [replies]
