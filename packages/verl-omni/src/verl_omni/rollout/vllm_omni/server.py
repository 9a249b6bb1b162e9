"""`vLLMOmniHttpServer`: diffusion rollout on vLLM-Omni's `AsyncOmni`, registered as rollout backend `vllm_omni`.

Same request and response as the embedded diffusers backend (`verl_omni.rollout.protocol`): one prompt, `n`
images seeded `seed + r`, the trajectory TensorDict of `sample_with_logprob`, so the trainer cannot tell the
backends apart. What differs is only where sampling runs: in vLLM-Omni's workers, through the custom pipelines of
`verl_omni.rollout.vllm_omni.pipelines`. Version differences are all in `compat`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import random
from pathlib import Path
from typing import Any, ClassVar

from verl_core.best_effort import best_effort
from verl_core.config.rollout import RolloutBaseConfig
from verl_core.rollout.errors import BadRequestError, WeightSyncError
from verl_core.rollout.protocol import GenerateRequest
from verl_core.rollout.server import ServerState
from verl_core.rollout.vllm.base import BaseVLLMHttpServer, free_port
from verl_core.rollout.vllm.lora_cache import LoRAEntry
from verl_core.rollout.weights import WeightUpdate
from verl_omni.rollout.vllm_omni import compat
from verl_omni.rollout.vllm_omni.lora import FAKE_LORA_PATH
from verl_omni.rollout.vllm_omni.pipelines import pipeline_qualname, sampling_extra_args
from verl_omni.rollout.vllm_omni.served import check_served_model
from verl_omni.rollout.vllm_omni.worker import EXTENSION_QUALNAME

__all__ = ["vLLMOmniHttpServer"]

logger = logging.getLogger(__name__)


class vLLMOmniHttpServer(BaseVLLMHttpServer):
    """Serve a Qwen-Image or SD3 pipeline folder with vLLM-Omni, returning FlowGRPO trajectories.

    - Engine: `AsyncOmni(model=<folder>, custom_pipeline_args={"pipeline_class": <log-prob pipeline>},
      worker_extension_cls=VerlOmniWorkerExtension, enable_sleep_mode=True, ...)`; `rollout.engine_kwargs.vllm_omni`
      is merged last. One request at a time per engine (the `n` images of a request are one batch).
    - Sleep and wake both go through `collective_rpc` (never the engine's own `sleep` / `wake_up`, which 0.24+
      tracks separately and would skip); sleep is always level 1 (level 2 drops the text encoder and VAE, which
      weight sync does not restore), and every wake restores everything, whatever tags were asked for.
    - Weight sync: full tensors into the pipeline's `load_weights` one by one (a refused or skipped name is a
      `WeightSyncError` naming it; `served_weights` reads them back through the same loader); LoRA tensors
      registered from memory (`OmniTensorLoRARequest`, `VLLMOmniHijack`), one fresh adapter id per weight version,
      the engine's adapter list read once per version (never per request: that serialized requests upstream).
    - Abort: the engine's `abort`, and the waiting generate returns `"abort"` at once on every release.

    Raises:
        ImportError: vllm-omni or vllm is missing (says `pip install "verl-omni[vllm-omni]"`).
        UnsupportedVersionError: an unsupported vllm-omni / vllm pair (lists the supported pairs), or a setting the
            installed release cannot serve (names the key and the version).
        ValueError: `rollout.model.path` is not a diffusers pipeline folder of a supported model.
    """

    engine_kwargs_key: ClassVar[str] = "vllm_omni"
    backend_module: ClassVar[str] = "vllm_omni"
    load_weights_rpc: ClassVar[str] = "verl_omni_load_weights"
    read_weights_rpc: ClassVar[str] = "verl_omni_read_weights"

    def __init__(self, config: RolloutBaseConfig, *, rank: int = 0) -> None:
        super().__init__(config, rank=rank)  # `_require_backend` checks the installed pair first
        from verl_omni.models.base import get_class
        from verl_omni.rollout import protocol  # the diffusion request / response shared with the diffusers backend

        self.request_model = protocol.DiffusionGenerateRequest  # type: ignore[misc]
        self.response_model = protocol.DiffusionGenerateResponse  # type: ignore[misc]
        self._parse = protocol.parse_diffusion_sampling_params
        index = Path(config.model.path) / "model_index.json"
        try:
            class_name = json.loads(index.read_text())["_class_name"]
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"rollout.model.path: {index} is not a readable diffusers model_index.json ({e})") from e
        self._class_name = class_name
        self._adapter_name = get_class(class_name, getattr(config, "external_lib", None)).name
        check_served_model(self._adapter_name, class_name, str(config.model.path), self._runtime.omni)
        self._pipeline_class = pipeline_qualname(self._adapter_name)
        if config.sleep_level != 1:
            raise compat.UnsupportedVersionError(
                f"rollout.sleep_level={config.sleep_level}: the vLLM-Omni backend sleeps at level 1 only (level 2 "
                f"drops the text encoder and VAE, which weight sync does not restore; vllm-omni {self._runtime.omni})"
            )
        self._defaults = self._sampling_defaults()
        self.engine_args()  # refuse what the installed release cannot do now, not at launch
        self._abort_events: dict[str, asyncio.Event] = {}
        self._listed_adapters: tuple[int, list[int]] | None = None

    # ---- family hooks ---------------------------------------------------------------------------

    def _require_backend(self) -> None:
        self._runtime = compat.require(type(self).__name__)

    def _worker_extension_cls(self) -> str | None:
        return EXTENSION_QUALNAME

    def _sampling_defaults(self) -> Any:
        from verl_omni.pipelines import DiffusionSamplingConfig

        make = getattr(self.config, "sampling_config", None)  # DiffusionRolloutConfig
        return make(self._adapter_name) if callable(make) else DiffusionSamplingConfig()

    def engine_args(self) -> dict[str, Any]:
        """The `AsyncOmni` keyword arguments this server starts its engine with.

        Raises:
            ValueError: `rollout.engine_kwargs.vllm_omni` is not a mapping.
            UnsupportedVersionError: a setting the installed release cannot serve (see `compat.engine_kwargs`).
        """
        config = self.config
        dtype = getattr(config, "dtype", None) or config.model.dtype
        args: dict[str, Any] = {
            "model": config.model.path,
            "seed": (config.seed or 0) + self.rank,
            "enforce_eager": config.enforce_eager,
            "enable_sleep_mode": True,
            "worker_extension_cls": self._worker_extension_cls(),
            "custom_pipeline_args": {"pipeline_class": self._pipeline_class},
            "max_num_seqs": 1,
            "trust_remote_code": config.model.trust_remote_code,
        }
        if dtype and dtype != "auto":
            args["dtype"] = dtype
        overrides = config.engine_kwargs.get(self.engine_kwargs_key) or {}
        if not isinstance(overrides, dict):
            raise ValueError(
                f"rollout.engine_kwargs.{self.engine_kwargs_key}: expected a mapping of AsyncOmni arguments, "
                f"got {type(overrides).__name__}"
            )
        args.update(overrides)
        return compat.engine_kwargs(self._runtime, args, supports_request_batch=False, lora=config.lora.enabled)

    async def _create_engine(self, engine_args: dict[str, Any]) -> Any:
        compat.envelope_post_processing(self._runtime, self._class_name)
        return compat.create_engine(engine_args)

    def _validate_sampling_params(self, params: dict[str, Any]) -> Any:
        return self._parse(self._defaults, params)

    # ---- lifecycle ------------------------------------------------------------------------------

    async def sleep(self, level: int | None = None) -> ServerState:
        """Free accelerator memory (level 1 only; see the class docstring)."""
        if level not in (None, 1):
            raise BadRequestError(
                f"sleep level {level}: the vLLM-Omni backend sleeps at level 1 only (vllm-omni {self._runtime.omni})",
                field="level",
            )
        return await super().sleep(1)

    async def wake_up(self, tags: list[str] | None = None) -> ServerState:
        """Restore everything `sleep` freed; vLLM-Omni has no KV cache to restore apart, so `tags` is ignored."""
        return await super().wake_up(None)

    # ---- engine hooks ---------------------------------------------------------------------------

    async def _engine_load(self) -> None:
        os.environ.setdefault("MASTER_PORT", str(free_port()))  # parallel servers must not share the dist port
        await super()._engine_load()

    async def _engine_generate(self, request_id: str, request: GenerateRequest, params: Any) -> dict[str, Any]:
        from tensordict import TensorDict

        if isinstance(request.prompt, list):
            raise BadRequestError(
                f"prompt: the vllm_omni backend serves one prompt per request, got a list of {len(request.prompt)}; "
                "send one request per prompt (rollout.agent.prompts_per_request=1)",
                field="prompt",
            )
        seed = request.seed if request.seed is not None else random.randrange(2**31)
        negative = getattr(request, "negative_prompt", None)
        config = dataclasses.replace(params, seed=seed, **({"negative_prompt": negative} if negative else {}))
        fields = {
            "height": config.height,
            "width": config.width,
            "num_inference_steps": config.num_inference_steps,
            "seed": seed,
            "num_outputs_per_prompt": config.n,
            "max_sequence_length": config.max_sequence_length,
        }
        sampling = compat.sampling_params(fields, sampling_extra_args(config), self._current_lora_request())
        event = self._abort_events[request_id] = asyncio.Event()
        stream = self._engine.generate(prompt=request.prompt, request_id=request_id, sampling_params_list=[sampling])
        try:
            final = await _last_unless(stream, event)
        finally:
            self._abort_events.pop(request_id, None)
        resolved = dataclasses.asdict(config)
        if final is None:
            return {"finish_reason": "abort", "seed": seed, "sampling_params": resolved, "trajectory": None}
        tensors, reason = compat.read_request_output(self._runtime, final)
        if reason == "abort" or not tensors:
            return {"finish_reason": "abort", "seed": seed, "sampling_params": resolved, "trajectory": None}
        need = {"images", "latents", "log_probs", "timesteps", "step_indices"}
        if not config.calculate_log_probs:  # a loss on clean samples: the final latents and the grid only
            need = {"images", "latents_clean", "timesteps"}
        missing = sorted(need - set(tensors))
        if missing:
            raise RuntimeError(
                f"vllm-omni {self._runtime.omni} returned an incomplete trajectory for {request_id!r}: missing "
                f"{missing} (got {sorted(tensors)})"
            )
        trajectory = TensorDict(dict(tensors), batch_size=[config.n])
        return {"finish_reason": "stop", "seed": seed, "sampling_params": resolved, "trajectory": trajectory}

    async def _engine_abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            event = self._abort_events.get(request_id)
            if event is not None:
                event.set()
        await compat.abort(self._runtime, self._engine, request_ids, self.config.lifecycle_timeout_s)

    async def _engine_sleep(self, level: int) -> None:
        await self._rpc("sleep", level=1)

    async def _engine_wake_up(self, tags: list[str]) -> None:
        await self._rpc("wake_up", tags=None)  # every pool: a partial wake would leave the engine half-restored

    async def _engine_finish_weights(self, update: WeightUpdate) -> None:
        if update.kind == "full":
            return
        int_id, name = self._lora_cache.new_id(update.version)
        tensors, self._lora_pending = self._lora_pending, {}
        replies = await self._worker_replies("verl_omni_add_lora", int_id=int_id, name=name, tensors=tensors,
                                             peft_config=dict(update.peft_config or {}))  # fmt: skip
        refused = [e["message"] for r in replies for e in r.get("errors", ())]
        if refused:
            raise WeightSyncError(f"LoRA adapter of version {update.version} was refused: {refused[0]}",
                                  field="peft_config")  # fmt: skip
        request = compat.lora_request(name, int_id, FAKE_LORA_PATH)
        for old in self._lora_cache.add(LoRAEntry(int_id, name, update.version, request)):
            await self._rpc("verl_omni_remove_lora", int_id=old.int_id)
        listed = _flatten(await self._engine.list_loras())  # once per weight version, never per request
        if int_id not in listed:
            raise WeightSyncError(f"LoRA adapter {int_id} is not registered on every worker (listed: {listed})")
        self._listed_adapters = (update.version, listed)

    async def _engine_shutdown(self) -> None:
        for event in self._abort_events.values():
            event.set()
        await super()._engine_shutdown()

    def _engine_metrics(self) -> dict[str, Any]:
        listed = self._listed_adapters
        return {
            **super()._engine_metrics(),
            "vllm_omni_version": self._runtime.omni,
            "engine_lora_ids": listed[1] if listed else [],
        }


async def _last_unless(stream: Any, aborted: asyncio.Event) -> Any:
    """The last item of an async iterator, or None as soon as `aborted` is set (the iterator is then closed)."""
    final = None
    iterator = stream.__aiter__()
    waiter = asyncio.ensure_future(aborted.wait())
    try:
        while True:
            step = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if step not in done:
                step.cancel()
                with best_effort(logger, "the aborted request's last stream step", asyncio.CancelledError, Exception):
                    await (
                        step
                    )  # cancelled: its CancelledError (or the engine's error for an aborted request) is expected
                return None
            try:
                final = step.result()
            except StopAsyncIteration:
                return final
    finally:
        waiter.cancel()
        close = getattr(iterator, "aclose", None)
        if close is not None:
            with best_effort(logger, "closing the request's output stream"):
                await close()


def _flatten(value: Any) -> list[int]:
    """Adapter ids from `list_loras()`: flat, nested per stage / rank, or a bare int (varies by release)."""
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    try:
        return [i for item in value for i in _flatten(item)]
    except TypeError:  # some engine backends return a non-iterable
        return []
