"""`ActorWorker`: one rank of the actor (and reference) engine as a Ray actor (`ActorGroup` drives all ranks).

Every rank builds a `DiffusersFSDPEngine` on its device and joins one torch.distributed group (gloo on the CPU,
NCCL on GPUs) through `RANK` / `WORLD_SIZE` / `MASTER_ADDR` / `MASTER_PORT`. With LoRA the reference policy is the
same engine with the adapters disabled; with full fine-tuning a second, `forward_only` engine holds the frozen
weights. It implements `verl_omni.trainer.actor_group.ActorWorkerAPI`; the trainer calls it through the typed proxy
`ActorGroup`, which splits each batch evenly over the ranks and bounds every call by `trainer.worker_timeout_s`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict

from verl_core.ray_tensors import register_tensor_transport
from verl_core.rollout.weight_push import WeightPusher
from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig, DiffusionRefConfig
from verl_omni.engine.auto_settings import (
    ReshardChoice,
    activation_bytes,
    choose_reshard_after_forward,
    resolve_compile_blocks,
)
from verl_omni.trainer.actor_group import ActorGroup  # re-export: the proxy moved to its own module
from verl_omni.trainer.flops import batch_geometry
from verl_omni.trainer.worker_proxy import WorkerError  # re-export: the proxy's error (every role's)

__all__ = ["ActorGroup", "ActorWorker", "WorkerError"]

logger = logging.getLogger(__name__)


class ActorWorker:
    """One actor rank: the FSDP2 engine (plus the reference engine for full fine-tuning with KL).

    Args:
        model (`DiffusionModelConfig`): the model (its `path` already resolved to a folder).
        actor (`DiffusionActorConfig`): the actor's update settings.
        ref (`DiffusionRefConfig`, *optional*): the reference's settings; built only when the KL term needs a
            separate frozen engine (full fine-tuning with `actor.use_kl_loss`).
        rank (`int`), world_size (`int`): this rank and the number of ranks.
        device (`str`): `"cuda"` or `"cpu"`.
        threads (`int`, *optional*): torch CPU threads.
        nccl_timeout (`int`): seconds of the process-group timeout.
    """

    def __init__(
        self,
        model: DiffusionModelConfig,
        actor: DiffusionActorConfig,
        ref: DiffusionRefConfig | None,
        *,
        rank: int,
        world_size: int,
        device: str,
        threads: int | None = None,
        nccl_timeout: int = 600,
    ) -> None:
        self.model_config, self.actor_config, self.ref_config = model, actor, ref
        self.rank, self.world_size, self.device = rank, world_size, device
        self.nccl_timeout = nccl_timeout
        if threads:
            torch.set_num_threads(threads)
        register_tensor_transport()  # results (reference means, log-probs) go back as raw bytes
        self.engine: Any = None
        self.ref_engine: Any = None
        self._pusher: WeightPusher | None = None  # rank 0: the weight-sync segment, reused step to step
        self.reshard_choices: dict[str, ReshardChoice] = {}  # `fsdp_config.reshard_after_forward: null`, resolved

    # ---- start-up -----------------------------------------------------------------------------------------

    def node_info(self, port_range: Sequence[int] = (20000, 30000)) -> dict[str, Any]:
        """This rank's node IP, hostname, pid and a free port in `port_range` (rank 0's is the master port)."""
        import ray

        return {
            "ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "port": _free_port(*port_range),
        }

    def init_engine(self, master_addr: str, master_port: int) -> dict[str, Any]:
        """Join the process group and build the engine(s); a collective over all ranks."""
        from verl_omni.engine import DiffusersFSDPEngine
        from verl_omni.engine.distributed import ensure_process_group

        os.environ.update(
            RANK=str(self.rank),
            WORLD_SIZE=str(self.world_size),
            LOCAL_RANK="0",  # Ray gives each worker its own device(s): the first visible one is ours
            MASTER_ADDR=master_addr,
            MASTER_PORT=str(master_port),
        )
        device = torch.device("cuda", 0) if self.device == "cuda" else torch.device("cpu")
        ensure_process_group(device, timeout_s=float(self.nccl_timeout))
        kwargs = {"device": device}  # the SDE settings come with each trajectory (`score_step`)
        self.engine = DiffusersFSDPEngine.from_pretrained(
            self.model_config,
            _built_resharding(self.actor_config),
            compile_blocks=resolve_compile_blocks(self.actor_config.fsdp_config.compile_blocks, device.type),
            **kwargs,
        )
        if self.ref_config is not None:
            ref_actor = DiffusionActorConfig(
                rollout_n=self.actor_config.rollout_n,
                ppo_mini_batch_size=self.actor_config.ppo_mini_batch_size,
                log_prob_micro_batch_size_per_gpu=self.ref_config.log_prob_micro_batch_size_per_gpu
                or self.actor_config.log_prob_micro_batch_size_per_gpu
                or self.actor_config.ppo_micro_batch_size_per_gpu,
                fsdp_config=self.ref_config.fsdp_config.evolve(forward_only=True),
            )
            ref_model = self.model_config.evolve(lora_rank=0, lora_adapter_path=None)
            self.ref_engine = DiffusersFSDPEngine.from_pretrained(
                ref_model,
                _built_resharding(ref_actor),
                compile_blocks=resolve_compile_blocks(ref_actor.fsdp_config.compile_blocks, device.type),
                **kwargs,
            )
        return {
            "num_lora_modules": self.engine.num_lora_modules,
            "num_sharded_blocks": self.engine.num_sharded_blocks,
            "compiled_blocks": _compiled_blocks(self.engine),
            "device": str(device),
        }

    # ---- the step -----------------------------------------------------------------------------------------

    def compute_log_prob(self, batch: TensorDict) -> TensorDict:
        """Old log-probs `(b, K)` of this rank's share (`old_log_probs`), on the CPU.

        Also `old_prev_sample_mean` when the loss needs the old transition means (`grpo_guard`).
        """
        self._resolve_resharding(batch)
        return self.engine.compute_log_prob(batch).to("cpu")

    def compute_ref(self, batch: TensorDict) -> TensorDict:
        """Reference `ref_log_probs` and `ref_prev_sample_mean` of this rank's share, on the CPU."""
        self._resolve_resharding(batch)
        engine = self.ref_engine if self.ref_engine is not None else self.engine
        return engine.compute_ref_log_prob(batch).to("cpu")

    def update_policy(self, batch: TensorDict) -> dict[str, float]:
        """The FlowGRPO update on this rank's share; metrics are already averaged over ranks."""
        self._resolve_resharding(batch)
        return self.engine.update_policy(batch)

    def _resolve_resharding(self, batch: TensorDict) -> None:
        """Resolve `reshard_after_forward: null` of each engine once, before its first forward, from this batch.

        `verl_omni.engine.auto_settings` has the rule; the choice and the numbers are logged once per rank and kept in
        `self.reshard_choices` (`actor`, `ref`).
        """
        if self.reshard_choices:
            return
        engines = {"actor": (self.engine, self.actor_config.fsdp_config.reshard_after_forward, True)}
        if self.ref_engine is not None and self.ref_config is not None:
            engines["ref"] = (self.ref_engine, self.ref_config.fsdp_config.reshard_after_forward, False)
        for name, (engine, value, trains) in engines.items():
            choice = _reshard_choice(engine, value, batch, self.actor_config, trains=trains)
            if not choice.reshard_after_forward:
                engine.module.set_reshard_after_forward(False)
            self.reshard_choices[name] = choice
            _log_info(f"rank {self.rank} {name} engine: {choice.describe()}")

    def refresh_old_policy(self, decay: float) -> dict[str, float]:
        """`θ_old ← decay·θ_old + (1 − decay)·θ` on this rank (a loss that reads the old velocity, DiffusionNFT)."""
        return self.engine.refresh_old_policy(decay)

    def push_weights(
        self,
        targets: list[Any],
        version: int,
        bucket_bytes: int,
        timeout_s: float,
        dtype: str | None = None,
        transport: str = "auto",
    ) -> dict[str, Any]:
        """Gather the trainable weights (a collective) and, on rank 0, send them to every rollout server.

        The export is the engine's fast path: gathered and cast on the device into one flat buffer that the engine
        reuses from step to step, left on the GPU when a server on this host takes it by CUDA IPC, else moved in one
        transfer into pinned host memory (this call drops its views before returning).

        Args:
            targets (`list[str]`): the rollout servers' HTTP addresses, rank order (`RolloutClient.update_weights`).
            version (`int`): the new weight version.
            bucket_bytes (`int`): bucket size of the HTTP stream.
            timeout_s (`float`): bound of each server's update.
            dtype (`str`, *optional*): cast to this dtype on the device before sending (e.g. `"bfloat16"`, the
                rollout's dtype: half the bytes of fp32); default: the master dtype.
            transport (`str`, *optional*, defaults to `"auto"`): `rollout.update_weights_transport`: `"auto"` shares
                the GPU export by CUDA IPC, or writes it once into this worker's shared-memory segment, for
                loopback servers (`WeightPusher`).

        Returns:
            `{"bytes", "export_s", "send_s", "shm_servers", "cuda_ipc_servers", "served_versions"}` (rank 0; zeros
            and no versions elsewhere); `served_versions` is the version each server answered, in `targets` order.
        """
        if self.rank == 0 and (self._pusher is None or self._pusher.transport != transport):
            self.close_weight_segment()
            self._pusher = WeightPusher(transport)
        # on the GPU for CUDA IPC (rank 0, a server on this host) or to be dropped (other ranks): no host hop
        pusher = self._pusher  # set above on rank 0; None on the other ranks
        on_gpu = self.device == "cuda" and (
            self.rank != 0 or (pusher is not None and pusher.wants_device_tensors(targets))
        )
        start = time.perf_counter()
        weights = self.engine.export_weights(
            dtype=getattr(torch, dtype) if dtype else None, device="cuda" if on_gpu else "cpu"
        )
        export_s = time.perf_counter() - start
        if self.rank != 0 or pusher is None:
            return {
                "bytes": 0.0,
                "export_s": export_s,
                "send_s": 0.0,
                "shm_servers": 0.0,
                "cuda_ipc_servers": 0.0,
                "served_versions": [],
            }
        peft_config = self._peft_config() if self.engine.use_lora else None
        size = float(sum(t.numel() * t.element_size() for t in weights.values()))
        start = time.perf_counter()
        sent = pusher.push(
            targets, weights, version=version, peft_config=peft_config, bucket_bytes=bucket_bytes, timeout_s=timeout_s
        )
        return {"bytes": size, "export_s": export_s, "send_s": time.perf_counter() - start, **sent}

    def exported_weights(self, dtype: str | None = None) -> dict[str, Any]:
        """The weights a push sends now, as CPU copies (a collective; for the served-weights check).

        Returns:
            `{"kind": "lora" | "full", "tensors": {name: tensor}}` on rank 0 (tensors empty on the other ranks).
        """
        weights = self.engine.export_weights(dtype=getattr(torch, dtype) if dtype else None, device="cpu")
        tensors = {name: t.to("cpu", copy=True) for name, t in weights.items()} if self.rank == 0 else {}
        return {"kind": "lora" if self.engine.use_lora else "full", "tensors": tensors}

    def close_weight_segment(self) -> None:
        """Unlink the weight-sync segment (before the worker is killed; also at garbage collection)."""
        if self._pusher is not None:
            self._pusher.close()
            self._pusher = None

    def _peft_config(self) -> dict[str, Any]:
        cfg = self.model_config
        return {
            "r": cfg.lora_rank,
            "lora_alpha": cfg.lora_alpha,
            "target_modules": cfg.target_modules,
            "exclude_modules": cfg.exclude_modules,
        }

    def save_checkpoint(self, path: str) -> None:
        """Save the actor engine's DCP checkpoint under `path` (a collective)."""
        self.engine.save_checkpoint(path)

    def load_checkpoint(self, path: str) -> int:
        """Load the actor engine's checkpoint from `path` (a collective); return its optimizer step."""
        return self.engine.load_checkpoint(path)

    def state_fingerprint(self) -> dict[str, Any]:
        """Full copies of the trainable parameters and the AdamW state (for tests; a collective)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
        model = get_model_state_dict(self.engine.module, options=opts)
        optim = get_optimizer_state_dict(self.engine.module, self.engine.optimizer, options=opts)
        # full state dicts with cpu_offload are rank 0's only: the other ranks get empty dicts
        return {"model": model, "optim": optim.get("state", {}), "step": self.engine.global_step}

    def peak_memory_gb(self) -> float:
        """Peak accelerator memory since the last call, in GiB (0 on the CPU); resets the counter."""
        if self.device != "cuda":
            return 0.0
        peak = torch.cuda.max_memory_allocated() / 2**30
        torch.cuda.reset_peak_memory_stats()
        return peak


def _log_info(line: str) -> None:
    """`line` at INFO; in a Ray worker, where logging is not configured, on stderr (Ray forwards it to the driver)."""
    if logging.getLogger().handlers or logger.handlers:
        logger.info(line)
    else:
        print(f"INFO {__name__}: {line}", file=sys.stderr, flush=True)


def _built_resharding(actor: DiffusionActorConfig) -> DiffusionActorConfig:
    """`actor` with `fsdp_config.reshard_after_forward: null` built as true (resolved before the first forward)."""
    if actor.fsdp_config.reshard_after_forward is not None:
        return actor
    return actor.evolve(fsdp_config=actor.fsdp_config.evolve(reshard_after_forward=True))


def _reshard_choice(
    engine: Any, value: bool | None, batch: TensorDict, actor: DiffusionActorConfig, *, trains: bool
) -> ReshardChoice:
    """`choose_reshard_after_forward` with this engine's model size, the batch's micro-batch and the free memory."""
    device = engine.device
    if value is not None or device.type != "cuda":
        return choose_reshard_after_forward(value, device_type=device.type, free_bytes=None, gathered_bytes=0,
                                            activation_bytes=0)  # fmt: skip
    params = list(engine.module.parameters())
    elem = torch.finfo(engine.param_dtype).bits // 8
    activations = 0
    if trains:
        adapter = engine.adapter
        try:
            g = batch_geometry(batch, adapter.name, adapter.transformer_config, adapter.vae_scale_factor,
                               temporal_scale=getattr(adapter, "vae_scale_factor_temporal", None))  # fmt: skip
        except KeyError as e:  # a model without a token formula, or a batch without the trajectory's keys
            return ReshardChoice(True, f"the micro-batch's tokens are unknown ({e}); resharded to be safe")
        micro = actor.ppo_micro_batch_size_per_gpu or g["rows"]
        activations = activation_bytes(
            adapter.transformer_config,
            tokens=g["image_tokens"] + g["text_tokens"],
            samples=min(micro, g["rows"]) * g["cfg"],
            elem_bytes=elem,
            checkpointing=engine.model_config.enable_gradient_checkpointing,
        )
    grads = sum(p.numel() for p in params if p.requires_grad) * 4 // max(engine.world_size, 1) if trains else 0
    choice = choose_reshard_after_forward(
        value,
        device_type=device.type,
        free_bytes=torch.cuda.mem_get_info(device)[0],
        gathered_bytes=sum(p.numel() for p in params) * elem,
        activation_bytes=activations,
        grad_bytes=grads,
    )
    if engine.world_size > 1:  # every rank must choose alike (the backward's all-gathers are collectives)
        import torch.distributed as dist

        keep = torch.tensor([0 if choice.reshard_after_forward else 1], device=device)
        dist.all_reduce(keep, op=dist.ReduceOp.MIN)
        if not choice.reshard_after_forward and int(keep.item()) == 0:
            reason = f"{choice.reason} here, but not on another rank: every rank reshards"
            choice = dataclasses.replace(choice, reshard_after_forward=True, reason=reason)
    return choice


def _compiled_blocks(engine: Any) -> int:
    """How many of the engine's sharded blocks carry a `torch.compile`d forward (`nn.Module.compile`)."""
    blocks = engine._blocks(engine.module, engine.fsdp_layer_prefixes)
    return sum(getattr(block, "_compiled_call_impl", None) is not None for block in blocks)


def _free_port(low: int, high: int) -> int:
    import random

    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        port = rng.randint(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"trainer.ray_master_port_range: no free port in [{low}, {high}] after 200 tries")
