"""`EngineHooks`: the hooks a rollout backend implements; `RolloutHttpServer` calls them on its server loop.

A backend subclasses `RolloutHttpServer` (which derives from this class) and fills in the abstract
`_engine_*` hooks; the optional ones have working defaults. Every hook runs on the server loop, bounded
by the server's timeouts; blocking engine work goes through `RolloutHttpServer._run_blocking`.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

import torch

from verl_core.config.rollout import RolloutBaseConfig
from verl_core.rollout.errors import UnsupportedError
from verl_core.rollout.protocol import GenerateRequest
from verl_core.rollout.weights import WeightKind, WeightUpdate

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

    from verl_core.rollout.chat import ChatCompletionRequest, ChatInputs

__all__ = ["EngineHooks"]


class EngineHooks(abc.ABC):
    """The engine contract of a rollout server: load, generate, abort, sleep/wake, weight sync, shutdown."""

    config: RolloutBaseConfig
    _assembling: dict[str, tuple[torch.Tensor, int]]  # tensors arriving as slices (reset per weight update)

    @abc.abstractmethod
    async def _engine_load(self) -> None:
        """Build the engine and load the model (runs on the server loop)."""

    @abc.abstractmethod
    async def _engine_generate(self, request_id: str, request: GenerateRequest, params: Any) -> dict[str, Any]:
        """Serve one request; return the response fields except `request_id` and `weight_version`."""

    async def _engine_chat(
        self, request_id: str, request: ChatCompletionRequest, inputs: ChatInputs, params: Any
    ) -> ChatCompletion:
        """Serve one OpenAI chat request (`inputs`: its messages and decoded images; `params`: sampling parameters).

        The default refuses: a backend that serves `/v1/chat/completions` overrides it.
        """
        raise UnsupportedError(f"{type(self).__name__} does not serve /v1/chat/completions")

    @abc.abstractmethod
    async def _engine_abort(self, request_ids: list[str]) -> None:
        """Ask the engine to stop these requests; their generates then finish with reason `"abort"`."""

    @abc.abstractmethod
    async def _engine_sleep(self, level: int) -> None:
        """Free accelerator memory (1: keep weights in host memory, 2: drop them)."""

    @abc.abstractmethod
    async def _engine_wake_up(self, tags: list[str]) -> None:
        """Restore what `_engine_sleep` freed, for the given tags (`"weights"`, `"kv_cache"`)."""

    @abc.abstractmethod
    async def _engine_begin_weights(self, update: WeightUpdate) -> None:
        """Check the update's manifest (raise `WeightSyncError` naming a bad tensor) and prepare."""

    @abc.abstractmethod
    async def _engine_load_bucket(self, update: WeightUpdate, tensors: list[tuple[str, torch.Tensor]]) -> None:
        """Apply one bucket; the tensors are views of a reused buffer, so clone what you keep."""

    async def _engine_load_slice(self, update: WeightUpdate, name: str, start: int, chunk: torch.Tensor) -> None:
        """Apply a flat element range of a tensor too large for one bucket.

        The default assembles the whole tensor (memory: the largest tensor) and hands it to
        `_engine_load_bucket`; engines that can write ranges in place override this.
        """
        spec = update.spec(name)
        whole, filled = self._assembling.get(name, (None, 0))
        if whole is None:
            whole = torch.empty(spec.numel, dtype=chunk.dtype)
        whole[start : start + chunk.numel()].copy_(chunk)
        filled += chunk.numel()
        if filled < spec.numel:
            self._assembling[name] = (whole, filled)
            return
        self._assembling.pop(name, None)
        await self._engine_load_bucket(update, [(name, whole.view(spec.shape))])

    async def _engine_finish_weights(self, update: WeightUpdate) -> None:  # noqa: B027 - optional hook
        """Commit the update after the last bucket (LoRA engines load the adapter here)."""

    async def _engine_abort_weights(self, update: WeightUpdate) -> None:  # noqa: B027 - optional hook
        """Drop a partly received update."""

    def _engine_sources_read(self) -> Any:
        """After a successful update from device tensors: a CUDA event done once the engine's reads of them are.

        Work queued after the event (e.g. a LoRA merge) may still be running. None: the server waits for all the
        device's queued work before it releases the sender's tensors.
        """
        return None

    async def _engine_read_weights(self, names: list[str], kind: WeightKind) -> dict[str, torch.Tensor]:
        """The tensors the engine serves now under these names, as `update_weights` names them (checks only).

        Full names are those of the model's state dict; LoRA names those of `peft.get_peft_model_state_dict`.
        Used by `RolloutHttpServer.served_weights` (the contract suite's read-back check); raise `KeyError`
        naming an unknown name.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement _engine_read_weights, which the contract suite's "
            "read-back check (served tensor == sent tensor) needs"
        )

    async def _engine_shutdown(self) -> None:  # noqa: B027 - optional hook
        """Release the engine."""

    def _validate_sampling_params(self, params: dict[str, Any]) -> Any:
        """Return the backend's sampling parameters for a request, raising `BadRequestError` naming the key."""
        return params

    def _engine_metrics(self) -> dict[str, Any]:
        """Backend-specific metrics merged into `/metrics`."""
        return {}

    async def _add_routes(self, app: Any) -> None:  # noqa: B027 - optional hook
        """Add backend routes (e.g. OpenAI-compatible ones) to the FastAPI app (runs on the server loop)."""

    def _default_sleep_level(self) -> int:
        """Sleep level used when `sleep()` is called without one."""
        return self.config.sleep_level
