"""`DiffusersHttpServer`: the embedded diffusion rollout backend `diffusers`, one `DiffusersRolloutEngine` each."""

from __future__ import annotations

import asyncio
import gc
import json
import random
import threading
import warnings
from typing import Any

import torch
from tensordict import TensorDict

from verl_core.config.rollout import RolloutBaseConfig
from verl_core.rollout.devices import resolve_device
from verl_core.rollout.errors import BadRequestError, NotReadyError, WeightSyncError
from verl_core.rollout.server import RolloutHttpServer
from verl_core.rollout.weights import TensorSpec, WeightKind, WeightUpdate, check_manifest
from verl_omni.config.rollout import DiffusionRolloutConfig
from verl_omni.pipelines import DiffusionSamplingConfig, GenerationAborted
from verl_omni.rollout.diffusers.coalesce import Coalescer, Job
from verl_omni.rollout.diffusers.engine import DiffusersRolloutEngine, canonical_weight_name
from verl_omni.rollout.diffusers.engine_calls import host_trajectories, run_jobs
from verl_omni.rollout.diffusers.options import DTYPES, engine_options
from verl_omni.rollout.diffusers.staging import packed_copy
from verl_omni.rollout.protocol import (
    DiffusionGenerateRequest,
    DiffusionGenerateResponse,
    parse_diffusion_sampling_params,
)

__all__ = ["DiffusersHttpServer"]


class DiffusersHttpServer(RolloutHttpServer):
    """Serve FlowGRPO trajectories from a diffusers pipeline folder, in-process (CPU or one GPU).

    A request is `k` prompts (usually one) with `n` images each (row `j` seeded `seed + j`), served as one
    pipeline call (`coalesce.segments` says when it takes more); the answer carries the trajectory
    TensorDict, sent as binary tensors over HTTP (`verl_omni.rollout.protocol`). Requests run on the engine thread,
    one at a time; with `engine_kwargs.diffusers.coalesce=true` those waiting for it with equal sampling parameters
    (seed aside) are coalesced into one pipeline call of at most `coalesce_max_images` images (default 32), each
    request's rows drawn with its own noise but rounded as part of the larger batch
    (`verl_omni.rollout.diffusers.coalesce`; off by default so that a request's result never depends on other
    requests). `abort` stops a
    request before its next denoising step (reason `"abort"`, no trajectory); a coalesced call stops early only
    when all its requests were aborted.

    Sleep: level 1 moves the pipeline to host memory (a no-op on CPU); level 2 drops it and `wake_up` reloads
    the folder and re-applies the last LoRA adapter, so the served weight version stays right. Level 2 is refused
    after a full weight update (the folder no longer holds the served weights). Weight sync goes through
    `DiffusersRolloutEngine.update_weights`: full transformer tensors (names as in its state dict; prefixes such
    as `transformer.` or `base_model.model.` are stripped) copied bucket by bucket, slices of large tensors
    written in place; LoRA tensors (as `peft.get_peft_model_state_dict` names them) with their peft config,
    loaded at the end of the update. The manifest is checked before a byte is applied; a LoRA config that binds
    no module is refused naming `target_modules`; a rejected LoRA update leaves the served adapter as it was.

    LoRA merge: by default the served adapter is folded into the base weights after every weight update
    (`DiffusersRolloutEngine(merge_lora=True)`), so sampling runs the plain model; `served_weights` still reads
    back the sent tensors (the adapter's, and the pristine base weights for a full update).
    `rollout.engine_kwargs.diffusers.merge_lora=false` runs peft's LoRA layers in the forward instead.

    Args:
        config (`RolloutBaseConfig`): a `DiffusionRolloutConfig` (its `pipeline`/`algo` give the default sampling
            parameters, `dtype` the weight dtype) or a plain `RolloutConfig` (defaults of `DiffusionSamplingConfig`,
            `model.dtype`); `model.path` is a diffusers pipeline folder.
        rank (`int`, *optional*, defaults to `0`): server rank (requests without a seed draw from `seed + rank`).

    Raises:
        ValueError: the config has no model path, `device` asks for CUDA without a GPU, or
            `rollout.engine_kwargs.diffusers` holds an unknown key or a wrong type.
    """

    request_model = DiffusionGenerateRequest
    response_model = DiffusionGenerateResponse

    def __init__(self, config: RolloutBaseConfig, *, rank: int = 0) -> None:
        super().__init__(config, rank=rank)
        if config.model is None:
            raise ValueError(
                "rollout.model.path is not set: build the server config with "
                "DiffusionRolloutConfig.with_model(actor_rollout_ref.model.path)"
            )
        if config.tensor_model_parallel_size != 1:
            warnings.warn(
                f"rollout.tensor_model_parallel_size={config.tensor_model_parallel_size} is ignored: the diffusers "
                "backend serves the whole pipeline on one device per server (tensor parallelism needs "
                "rollout.name=vllm_omni)",
                stacklevel=2,
            )
        self._device = resolve_device(config.device)
        if isinstance(config, DiffusionRolloutConfig):
            self._dtype, self._external_lib = config.torch_dtype, config.external_lib
        else:
            self._dtype, self._external_lib = DTYPES[config.model.dtype], None
        options, coalesce = engine_options(config.engine_kwargs)
        # compiled blocks sample ~1.3x faster on an H200 (docs/benchmarks.md); on a CPU the compile costs more
        options.setdefault("compile_blocks", self._device.type == "cuda" and not config.enforce_eager)
        self._coalescer = Coalescer(self._run_batch, lambda: self._run_blocking(_no_op), **coalesce)
        self._engine_options = options  # `DiffusersRolloutEngine` arguments
        self._engine: DiffusersRolloutEngine | None = None
        self._defaults = DiffusionSamplingConfig()
        self._seeds = random.Random(None if config.seed is None else config.seed + rank)
        self._abort_flags: dict[str, threading.Event] = {}
        self._table: dict[str, torch.Tensor] = {}
        # the served adapter: (config, host copies of its tensors, or None while only the engine holds them)
        self._lora: tuple[dict[str, Any], dict[str, torch.Tensor] | None] | None = None
        # a LoRA update's tensors until it finishes: packed host copies, or a CUDA IPC update's device views
        self._lora_pending: dict[str, torch.Tensor] = {}
        self._lora_previous: list[Any] = []  # [previous _lora] while an update swapped the adapter
        self._sources_read: Any = None  # CUDA event: the last update's copies from the sender's tensors are done
        self._parsed_lora: tuple[dict[str, Any], Any] | None = None  # the last peft config and its LoraConfig
        self._full_version: int | None = None
        self._images = 0

    # ---- load / generate ------------------------------------------------------------------------

    async def _engine_load(self) -> None:
        await self._run_blocking(self._load_engine)

    def _load_engine(self) -> None:
        engine = DiffusersRolloutEngine(
            self.config.model.path,
            device=self._device,
            dtype=self._dtype,
            external_lib=self._external_lib,
            **self._engine_options,
        )
        if isinstance(self.config, DiffusionRolloutConfig):
            self._defaults = self.config.sampling_config(engine.pipeline.adapter.name)
        self._engine = engine

    def _validate_sampling_params(self, params: dict[str, Any]) -> DiffusionSamplingConfig:
        return parse_diffusion_sampling_params(self._defaults, params)

    async def _engine_generate(
        self, request_id: str, request: DiffusionGenerateRequest, params: DiffusionSamplingConfig
    ) -> dict[str, Any]:
        seed = request.seed if request.seed is not None else self._seeds.randrange(2**62)
        negatives = [params.negative_prompt if neg is None else neg for neg in request.negative_prompts]
        sampling = params.evolve(negative_prompt=negatives[0])
        flag = threading.Event()
        self._abort_flags[request_id] = flag
        loop = asyncio.get_running_loop()
        job = Job(request.prompts, sampling, seed, flag, loop.create_future(), negatives=negatives)
        try:
            trajectory = await self._coalescer.submit(job)  # sets the flag when cancelled (a timed-out request)
        finally:
            self._abort_flags.pop(request_id, None)
        resolved = {**sampling.to_dict(), "seed": seed}
        if isinstance(request.prompt, list):
            resolved["negative_prompt"] = negatives
        fields = {"seed": seed, "sampling_params": resolved}
        if trajectory is None:
            return {"finish_reason": "abort", **fields}
        return {"finish_reason": "stop", "trajectory": trajectory, **fields}

    async def _run_batch(self, jobs: list[Job]) -> list[TensorDict | None]:
        return await self._run_blocking(self._generate_blocking, jobs)

    def _generate_blocking(self, jobs: list[Job]) -> list[TensorDict | None]:
        """Run `jobs` on the engine (`engine_calls.run_jobs`), trajectories on the host; aborted jobs get None."""
        engine = self._require_engine("generate")
        try:
            parts = run_jobs(engine, jobs)
        except GenerationAborted:
            return [None] * len(jobs)
        self._images += sum(job.images for job in jobs)
        return host_trajectories(engine, jobs, parts)

    async def _engine_abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            flag = self._abort_flags.get(request_id)
            if flag is not None:
                flag.set()

    def _require_engine(self, op: str) -> DiffusersRolloutEngine:
        if self._engine is None:
            raise NotReadyError(f"{op}: the pipeline was dropped by sleep(level=2); call wake_up() first")
        return self._engine

    # ---- sleep / wake ---------------------------------------------------------------------------

    async def _engine_sleep(self, level: int) -> None:
        if level == 2 and self._full_version is not None:
            raise BadRequestError(
                f"sleep(level=2) would drop the full weights of version {self._full_version}, which the diffusers "
                "backend cannot reload from model.path; use level 1 (weights kept in host memory)",
                field="level",
            )
        await self._run_blocking(self._sleep_blocking, level)

    def _sleep_blocking(self, level: int) -> None:
        if level == 2:
            self._keep_lora_on_host()  # the reload applies it again
            self._engine = None
        elif self._engine is not None:
            self._engine.sleep()
        if level == 2:
            # a full collection costs ~0.25 s in a server process; level 1 repoints the parameters at host copies in
            # place, so their device storage is freed by reference counting and the collector has nothing to find
            gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    async def _engine_wake_up(self, tags: list[str]) -> None:
        if "weights" not in tags:
            return  # the pipeline keeps no cache between requests
        if self._engine is None:
            await self._run_blocking(self._reload_blocking)
        else:
            await self._run_blocking(self._engine.wake_up)

    def _reload_blocking(self) -> None:
        self._load_engine()
        if self._lora is not None:  # the served version includes this adapter: apply it again
            config, tensors = self._lora
            self._engine.update_weights(tensors, lora_config=_lora_config(config))

    # ---- weight sync ----------------------------------------------------------------------------

    async def _engine_begin_weights(self, update: WeightUpdate) -> None:
        engine = self._require_engine("update_weights")
        self._sources_read = None
        if update.kind == "full":
            self._table = engine.weight_table(lora=False)
            check_manifest(_canonical(update.manifest), {k: tuple(v.shape) for k, v in self._table.items()})
        else:
            await self._run_blocking(self._prepare_lora, engine, update)

    def _prepare_lora(self, engine: DiffusersRolloutEngine, update: WeightUpdate) -> None:
        config = _peft_dict(update.peft_config)
        lora_config = self._lora_config(config)
        self._lora_previous = []
        if self._lora is None or self._lora[0] != config:
            self._keep_lora_on_host()  # a rejected update restores it
            self._lora_previous = [self._lora]
            engine.remove_lora()
            try:
                engine.add_lora(lora_config)
            except ValueError as e:
                self._restore_lora()
                message = f"peft_config.{str(e).removeprefix('lora_config.')}"
                raise WeightSyncError(message, field="peft_config.target_modules") from e
        try:
            expected = {k: tuple(v.shape) for k, v in engine.weight_table(lora=True).items()}
            manifest = _canonical(update.manifest)
            check_manifest(manifest, expected)
            missing = sorted(set(expected) - {s.name for s in manifest})
            if missing:
                raise WeightSyncError(
                    f"LoRA update lacks {len(missing)} of the adapter's {len(expected)} tensors, e.g. {missing[0]!r}",
                    field=missing[0],
                )
        except WeightSyncError:
            self._restore_lora()
            raise
        self._lora_pending = {}

    def _restore_lora(self) -> None:
        """After a rejected LoRA update that swapped the adapter: serve the previous adapter (or none) again."""
        if not self._lora_previous or self._engine is None:
            return
        (previous,), self._lora_previous = self._lora_previous, []
        self._engine.remove_lora()
        self._lora = previous
        if previous is not None:
            self._engine.update_weights(previous[1], lora_config=_lora_config(previous[0]))

    async def _engine_load_bucket(self, update: WeightUpdate, tensors: list[tuple[str, torch.Tensor]]) -> None:
        if update.kind == "full":
            await self._run_blocking(self._require_engine("update_weights").update_weights, tensors)
        else:
            names, sources = [canonical_weight_name(n) for n, _ in tensors], [t for _, t in tensors]
            if not all(t.device.type == "cuda" for t in sources):  # views of the segment or the stream's buffer
                sources = packed_copy(sources, pin=self._device.type == "cuda")  # one pinned buffer, not a clone each
            self._lora_pending.update(zip(names, sources))  # CUDA IPC views: the engine copies device to device

    def _keep_lora_on_host(self) -> None:
        """Copy the served adapter out of the engine's parameters, before a level-2 sleep or an adapter swap.

        After an update the engine's parameters are the adapter's only copy (no per-update host copy); a reload
        after `sleep(level=2)` and the restore after a rejected swap need one that outlives them.
        """
        if self._lora is None or self._lora[1] is not None or self._engine is None:
            return
        table = self._engine.weight_table(lora=True)
        names = list(table)
        copies = packed_copy([table[n].detach() for n in names], pin=self._device.type == "cuda", device="cpu")
        if self._device.type == "cuda":
            torch.cuda.current_stream(self._device).synchronize()
        self._lora = (self._lora[0], dict(zip(names, copies)))

    async def _engine_load_slice(self, update: WeightUpdate, name: str, start: int, chunk: torch.Tensor) -> None:
        if update.kind != "full":
            return await super()._engine_load_slice(update, name, start, chunk)
        await self._run_blocking(self._copy_slice, canonical_weight_name(name), start, chunk)

    def _copy_slice(self, name: str, start: int, chunk: torch.Tensor) -> None:
        with torch.no_grad():  # in place: no whole-tensor buffer for tensors larger than a bucket
            self._table[name].view(-1)[start : start + chunk.numel()].copy_(chunk)

    async def _engine_finish_weights(self, update: WeightUpdate) -> None:
        self._table = {}
        if update.kind == "full":
            self._full_version = update.version
            engine = self._require_engine("update_weights")
            await self._run_blocking(lambda: (engine.mark_sources_read(), engine.remerge_lora()))
            self._sources_read = engine.sources_read  # the slices are copied; the merge may still be running
            return
        engine = self._require_engine("update_weights")
        config = _peft_dict(update.peft_config)
        load, self._lora_pending = self._lora_pending, {}
        lora_config = self._lora_config(config)
        await self._run_blocking(lambda: engine.update_weights(load, lora_config=lora_config))
        self._sources_read = engine.sources_read  # the merge after the copies may still be running
        self._lora, self._lora_previous = (config, None), []  # the engine's parameters hold it now

    def _engine_sources_read(self) -> Any:
        return self._sources_read

    def _lora_config(self, config: dict[str, Any]) -> Any:
        """`_lora_config(config)`, parsed once while the updates bring the same peft config (each LoRA push does)."""
        if self._parsed_lora is None or self._parsed_lora[0] != config:
            self._parsed_lora = (config, _lora_config(config))
        return self._parsed_lora[1]

    async def _engine_abort_weights(self, update: WeightUpdate) -> None:
        self._table, self._lora_pending = {}, {}
        if update.kind == "lora":
            await self._run_blocking(self._restore_lora)
        elif self._engine is not None:  # the base weights written so far are served with the adapter merged in
            await self._run_blocking(self._engine.remerge_lora)

    async def _engine_read_weights(self, names: list[str], kind: WeightKind) -> dict[str, torch.Tensor]:
        table = self._require_engine("served_weights").weight_table(lora=kind == "lora")
        out = {}
        for name in names:
            served = table.get(canonical_weight_name(name))
            if served is None:
                raise KeyError(f"{kind} tensor {name!r} is not served ({len(table)} {kind} tensors are)")
            out[name] = served
        return out

    async def _engine_shutdown(self) -> None:
        self._engine, self._table, self._lora_pending = None, {}, {}
        gc.collect()

    def _engine_metrics(self) -> dict[str, Any]:
        engine = self._engine
        on_device = 0
        if engine is not None:
            on_device = sum(
                p.numel() * p.element_size() for p in engine.pipeline.transformer.parameters() if p.device.type != "cpu"
            )
        return {
            "device": str(self._device),
            "dtype": str(self._dtype).removeprefix("torch."),
            "model": engine.pipeline.adapter.name if engine is not None else None,
            "weights_resident": engine is not None,
            "lora_active": self._lora is not None,
            "images_generated": self._images,
            "coalesced_calls": self._coalescer.calls,
            "coalesced_requests": self._coalescer.requests,
            "param_bytes_on_accelerator": on_device,
        }


def _no_op() -> None:
    return None


def _canonical(manifest: list[TensorSpec]) -> list[TensorSpec]:
    return [TensorSpec(canonical_weight_name(s.name), s.dtype, s.shape) for s in manifest]


def _peft_dict(peft_config: Any) -> dict[str, Any]:
    """The peft config as plain JSON data (sets as sorted lists), so HTTP and in-process updates compare equal."""
    plain = json.loads(json.dumps(dict(peft_config or {}), default=_json_default))
    return {"peft_type": "LORA", **plain}


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise WeightSyncError(
        f"peft_config holds a {type(value).__name__} {value!r:.80}, not JSON data", field="peft_config"
    )


def _lora_config(config: dict[str, Any]) -> Any:
    from peft import LoraConfig, get_peft_config

    try:
        lora_config = get_peft_config(dict(config))
    except Exception as e:
        raise WeightSyncError(f"peft_config rejected by peft: {type(e).__name__}: {e}", field="peft_config") from e
    if not isinstance(lora_config, LoraConfig):
        raise WeightSyncError(f"peft_config must describe a LoRA adapter, got {type(lora_config).__name__}")
    return lora_config
