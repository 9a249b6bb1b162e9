"""`DiffusersFSDPEngine`: FSDP2 training engine of a diffusers denoiser for FlowGRPO (log-probs, policy update).

The engine never re-implements the policy: every log-prob it computes goes through the model adapter's
`score_step`, i.e. the same guided-velocity function and the same `FlowMatchSDEDiscreteScheduler.step` (with
`prev_sample` given) that the sampler ran.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from tensordict import TensorDict
from torch import nn

from verl_omni.algos import loss_spec
from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig, torch_dtype_name
from verl_omni.engine.auto_settings import disable_cudnn_sdpa, resolve_cudnn_sdpa
from verl_omni.engine.batching import micro_batches, to_device, trained_rows
from verl_omni.engine.checkpoint import load_engine_checkpoint, save_engine_checkpoint
from verl_omni.engine.distributed import default_device, ensure_process_group, make_mesh
from verl_omni.engine.lora import adapters_disabled, apply_lora, export_weights
from verl_omni.engine.old_policy import OldPolicy
from verl_omni.engine.optim import build_lr_scheduler, build_optimizer
from verl_omni.engine.sharding import fsdp_blocks, layer_prefixes, shard_transformer
from verl_omni.engine.weight_export import ExportBuffer

__all__ = ["DiffusersFSDPEngine"]


class DiffusersFSDPEngine:
    """FSDP2 engine for a diffusers denoiser: log-prob recompute, reference means, FlowGRPO update, export, checkpoints.

    Features and their flags:

    * FSDP2: `fully_shard` on every child of the module lists named by `model.fsdp_layer_prefixes` (null: the
      adapter's `fsdp_layer_prefixes`; the transformer blocks), then on the root; 1-D mesh over all ranks;
      `fsdp_config.reshard_after_forward`.
    * Mixed precision: master weights in `fsdp_config.model_dtype` (fp32), compute in `fsdp_config.dtype`
      (bf16), gradient reduction in `fsdp_config.reduce_dtype` (fp32).
    * Offload: `fsdp_config.param_offload` / `offload_policy` → FSDP2 `CPUOffloadPolicy` (params, grads and
      the AdamW step on the CPU); `fsdp_config.optimizer_offload` → AdamW state parked on the CPU between updates.
    * LoRA: `model.lora_rank > 0` (peft; rank, alpha, init, target/exclude modules); 0 = full fine-tuning.
    * Gradient checkpointing: `model.enable_gradient_checkpointing`.
    * Attention backend: `fsdp_config.cudnn_sdpa` (null: the adapter's `cudnn_sdpa_in_training`) false turns
      PyTorch's cuDNN SDPA backend off for the whole process, before any block is compiled.
    * Backend: gloo on the CPU, NCCL on CUDA; launched by `torchrun` or by Ray workers with the same env vars.

    The sampler settings that change the transition density (`sde_type`, `cps_logprob`, `noise_level`, guidance,
    the schedule) are read from each trajectory (see `DiffusionModelBase.score_step`): the rollout recorded them
    there, and that record is their one source on the training side (nothing passes them to the engine).

    Raises:
        LoRABindingError: the LoRA config binds no module.
        ValueError: CPU offload requested on a CPU device, or `fsdp_config.fsdp_size` not in {-1, world size}.
    """

    def __init__(
        self,
        transformer: nn.Module,
        *,
        adapter: Any,
        scheduler: Any,
        actor_config: DiffusionActorConfig,
        model_config: DiffusionModelConfig,
        device: str | torch.device | None = None,
        compile_blocks: bool = False,
    ) -> None:
        fsdp = actor_config.fsdp_config
        self.config = actor_config
        self.model_config = model_config
        self.adapter = adapter
        self.scheduler = scheduler
        self.forward_only = fsdp.forward_only
        self.global_step = 0
        self._export_buffer: ExportBuffer | None = None

        # 1. process group, mesh, seed
        self.device = default_device(device)
        if fsdp.cpu_offload and self.device.type != "cuda":
            raise ValueError(
                "actor.fsdp_config.param_offload / offload_policy: CPU offload needs a CUDA device, the engine runs "
                f"on {self.device}; set both to false"
            )
        ensure_process_group(self.device)
        self.mesh = make_mesh(self.device, fsdp.fsdp_size)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        torch.manual_seed(fsdp.seed)  # same LoRA init on every rank
        if fsdp.full_determinism:
            torch.use_deterministic_algorithms(True)
        self.param_dtype = getattr(torch, torch_dtype_name(fsdp.dtype))
        # cuDNN's SDPA backend: off for the process when the model's training needs it (before any compile)
        self.cudnn_sdpa = resolve_cudnn_sdpa(fsdp.cudnn_sdpa, adapter, training=not self.forward_only)
        disable_cudnn_sdpa(self.cudnn_sdpa)

        # 2. master dtype, attention backend, LoRA / full fine-tuning, gradient checkpointing
        master_dtype = getattr(torch, torch_dtype_name(fsdp.model_dtype))
        if any(p.dtype != master_dtype for p in transformer.parameters() if p.is_floating_point()):
            transformer.to(dtype=master_dtype)
        if model_config.attn_backend is not None:
            transformer.set_attention_backend(model_config.attn_backend)
        self.use_lora = model_config.use_lora
        self.num_lora_modules = apply_lora(transformer, model_config) if self.use_lora else 0
        if not self.use_lora:
            transformer.requires_grad_(not self.forward_only)
        if self.forward_only:
            transformer.requires_grad_(False)
        if model_config.enable_gradient_checkpointing and not self.forward_only:
            transformer.enable_gradient_checkpointing()

        # 3. FSDP2: each transformer block, then the root (`engine/sharding.py`)
        self.fsdp_layer_prefixes = layer_prefixes(model_config, adapter)
        self.num_sharded_blocks = shard_transformer(
            transformer,
            mesh=self.mesh,
            fsdp=fsdp,
            prefixes=self.fsdp_layer_prefixes,
            param_dtype=self.param_dtype,
            compile_blocks=compile_blocks,
        )
        self.module = transformer

        # 4. optimizer and LR schedule
        self.optimizer = None
        self.lr_scheduler = None
        if not self.forward_only:
            self.optimizer = build_optimizer(
                [p for p in transformer.parameters() if p.requires_grad], actor_config.optim
            )
            self.lr_scheduler = build_lr_scheduler(self.optimizer, actor_config.optim)

        # 5. the old policy θ_old of a loss that reads the old velocity (DiffusionNFT): a copy of θ, refreshed by
        #    `refresh_old_policy` after each training step
        self.old_policy = None
        if not self.forward_only and "old_velocity" in loss_spec(actor_config.diffusion_loss.loss_mode).needs:
            self.old_policy = OldPolicy(transformer)

    # ---- construction helpers -----------------------------------------------------------------------------

    @classmethod
    def from_pretrained(
        cls,
        model_config: DiffusionModelConfig,
        actor_config: DiffusionActorConfig,
        **kwargs: Any,
    ) -> DiffusersFSDPEngine:
        """Load the denoiser of the pipeline folder `model_config.path`, its adapter and SDE scheduler; build."""
        from diffusers import AutoModel

        from verl_omni.models import adapter_for_folder

        adapter = adapter_for_folder(model_config.path)
        transformer = AutoModel.from_pretrained(
            str(model_config.path), subfolder=model_config.transformer_subfolder, torch_dtype=torch.float32
        )
        return cls(
            transformer,
            adapter=adapter,
            scheduler=adapter.build_scheduler(),
            actor_config=actor_config,
            model_config=model_config,
            **kwargs,
        )

    # children of the module lists named by `prefixes` (`model.fsdp_layer_prefixes`): the FSDP units
    _blocks = staticmethod(fsdp_blocks)

    # ---- forward paths ------------------------------------------------------------------------------------

    def _to_device(self, batch: TensorDict, *, update: bool = False) -> TensorDict:
        return to_device(batch, self.device, update=update, use_kl=self.config.use_kl_loss)

    def _score(self, micro: TensorDict, j: int) -> Any:
        return self.adapter.score_step(
            self.module,
            self.scheduler,
            micro,
            j,
            dtype=self.param_dtype,
        )

    _micro_batches = staticmethod(micro_batches)

    @contextlib.contextmanager
    def _reference_mode(self) -> Iterator[None]:
        if self.use_lora:
            with adapters_disabled(self.module):
                yield
        elif self.forward_only:
            yield
        else:
            raise ValueError(
                "compute_ref_log_prob: this engine fully fine-tunes the model (model.lora_rank=0), so its weights are "
                "not the reference; build a second engine with actor.fsdp_config.forward_only=true for the reference"
            )

    @torch.no_grad()
    def _forward_all(self, batch: TensorDict, *, keep_mean: bool) -> TensorDict:
        self.module.eval()
        micro_size = self.config.log_prob_micro_batch_size_per_gpu or self.config.ppo_micro_batch_size_per_gpu
        k = batch["log_probs"].shape[1]
        log_probs, means = [], []
        for micro in self._micro_batches(batch, micro_size):
            micro = self._to_device(micro)
            rows, _ = trained_rows(micro, k)  # DanceGRPO: only the rows that train step j (the others stay 0)
            lp, mu = [], []
            for j in range(k):
                if rows[j] is None:
                    out = self._score(micro, j)
                    lp.append(out.log_prob)
                    if keep_mean:
                        mu.append(out.prev_sample_mean)
                    continue
                lp.append(micro["log_probs"].new_zeros(micro.batch_size[0]))
                if keep_mean:
                    mu.append(micro["latents"][:, 0].new_zeros(micro["latents"][:, 0].shape))
                if rows[j].numel():
                    out = self._score(micro[rows[j]], j)
                    idx = rows[j].to(lp[-1].device)
                    lp[-1][idx] = out.log_prob.to(lp[-1].dtype)
                    if keep_mean:
                        mu[-1][idx] = out.prev_sample_mean.to(mu[-1].dtype)
            log_probs.append(torch.stack(lp, dim=1))
            if keep_mean:
                means.append(torch.stack(mu, dim=1))
        result = {"log_probs": torch.cat(log_probs)}
        if keep_mean:
            result["prev_sample_mean"] = torch.cat(means)
        return TensorDict(result, batch_size=batch.batch_size)

    def compute_log_prob(self, batch: TensorDict) -> TensorDict:
        """Recompute the log-probs of every stored window step under the current weights (no grad).

        Args:
            batch (`TensorDict`, batch `[B]`): a trajectory batch (layout of the log-prob pipelines).

        Returns:
            `TensorDict` with `old_log_probs` `(B, K)` float32 on the engine device, and `old_prev_sample_mean`
            `(B, K, *latent)` when the loss (`actor.diffusion_loss.loss_mode`) needs the old transition means.
        """
        keep_mean = "old_prev_sample_mean" in self._loss_needs
        out = self._forward_all(batch, keep_mean=keep_mean)
        result = {"old_log_probs": out["log_probs"]}
        if keep_mean:
            result["old_prev_sample_mean"] = out["prev_sample_mean"]
        return TensorDict(result, batch_size=batch.batch_size)

    @property
    def _loss_needs(self) -> frozenset[str]:
        return loss_spec(self.config.diffusion_loss.loss_mode).needs

    def compute_ref_log_prob(self, batch: TensorDict) -> TensorDict:
        """Reference policy (LoRA adapters disabled, or a `forward_only` engine): log-probs and transition means.

        Returns:
            `TensorDict` with `ref_log_probs` `(B, K)` and `ref_prev_sample_mean` `(B, K, *latent)` float32.

        Raises:
            ValueError: a trainable full fine-tuning engine has no separate reference weights.
        """
        with self._reference_mode():
            out = self._forward_all(batch, keep_mean=True)
        return TensorDict(
            {"ref_log_probs": out["log_probs"], "ref_prev_sample_mean": out["prev_sample_mean"]},
            batch_size=batch.batch_size,
        )

    # ---- policy update ------------------------------------------------------------------------------------

    # the update of each loss kind `LossSpec.trains_on`: its module registers it (`engine/transition_update.py`,
    # `engine/clean_update.py`, `engine/pair_update.py`, imported by `verl_omni.engine`), so the engine never imports
    # the modules that take it as an argument
    _updates: ClassVar[dict[str, Callable[[DiffusersFSDPEngine, TensorDict], dict[str, float]]]] = {}

    @classmethod
    def register_update(cls, trains_on: str) -> Callable[[Callable], Callable]:
        """Decorator: `fn(engine, batch) -> metrics` is the policy update of the losses with `trains_on`."""

        def deco(fn: Callable[[DiffusersFSDPEngine, TensorDict], dict[str, float]]) -> Callable:
            cls._updates[trains_on] = fn
            return fn

        return deco

    def _update_for(self, trains_on: str) -> Callable[[DiffusersFSDPEngine, TensorDict], dict[str, float]]:
        if trains_on not in self._updates:
            raise ValueError(
                f"update_policy: actor.diffusion_loss.loss_mode={self.config.diffusion_loss.loss_mode!r} trains on "
                f"{trains_on!r}, which has no registered update (registered: {sorted(self._updates)}); import "
                "verl_omni.engine, which registers them"
            )
        return self._updates[trains_on]

    @property
    def _group_size(self) -> int:
        """`actor.rollout_n`, images per prompt; the trainer config fills it from `actor_rollout_ref.rollout.n`."""
        if self.config.rollout_n is None:
            raise ValueError(
                "actor.rollout_n: null, but mini-batches are counted in prompts of rollout_n images each; set "
                "DiffusionActorConfig(rollout_n=<images per prompt>) (the trainer fills it from "
                "actor_rollout_ref.rollout.n)"
            )
        return self.config.rollout_n

    def _mini_batches(self, batch: TensorDict, epoch: int) -> list[TensorDict]:
        n = batch.batch_size[0]
        global_mini = self.config.ppo_mini_batch_size * self._group_size
        if global_mini % self.world_size:
            raise ValueError(
                f"actor.ppo_mini_batch_size * rollout_n = {global_mini} is not divisible by the world size "
                f"{self.world_size}"
            )
        mini = min(global_mini // self.world_size, n)
        if n % mini:
            raise ValueError(
                f"update_policy: the local batch of {n} samples is not a multiple of the local mini-batch of {mini} "
                f"(actor.ppo_mini_batch_size * rollout_n / world size)"
            )
        if self.config.shuffle:
            gen = torch.Generator().manual_seed(self.config.data_loader_seed + epoch + self.global_step)
            batch = batch[torch.randperm(n, generator=gen)]
        return [batch[s : s + mini] for s in range(0, n, mini)]

    def update_policy(self, batch: TensorDict) -> dict[str, float]:
        """FlowGRPO update on a local batch: one optimizer step per mini-batch, `ppo_epochs` passes.

        For each micro-batch and each trained window step one forward/backward runs the loss registered as
        `actor.diffusion_loss.loss_mode` (`verl_omni.algos.get_loss`); the loss is scaled by
        `micro_size / mini_size / K` so the optimizer sees the mean over samples and steps; then the grad norm
        is clipped (`optim.clip_grad`) and AdamW steps (skipped when the norm is not finite).

        Args:
            batch (`TensorDict`, batch `[B]`): the trajectory plus `old_log_probs` `(B, K)`, `advantages` `(B,)`
                or `(B, K)`, `ref_prev_sample_mean` `(B, K, *latent)` when `actor.use_kl_loss`, and
                `old_prev_sample_mean` `(B, K, *latent)` when the loss needs it (`grpo_guard`). Without
                `old_log_probs` an on-policy update (`ppo_epochs` 1, the local batch one mini-batch) takes them (and
                the old means) from its own forwards (detached): the same values a `compute_log_prob` pass would give
                up to kernel numerics, without that pass's cost; the ratio of every term is then exactly 1.

        Returns:
            Metrics averaged over steps, micro-batches and ranks (min/max for `*_min`/`*_max`): `actor/pg_loss`,
            `actor/kl_loss` (with KL), `actor/<name>` for each metric of the loss (`flow_grpo`: `pg_clipfrac`,
            `pg_clipfrac_higher|lower`, `ppo_kl`, `approx_kl`, `ratio_mean|min|max`), `actor/grad_norm`,
            `actor/lr` (of the last optimizer step), and `actor/rollout_logprob_diff_mean|max` (when the rollout
            `log_probs` are in the batch).

        Raises:
            ValueError: the engine is `forward_only`, a required key is missing, the batch does not split, or
                `old_log_probs` is missing and the update is not on-policy.
        """
        if self.forward_only:
            raise ValueError("update_policy: this engine was built with actor.fsdp_config.forward_only=true")
        # FlowGRPO and kin train on SDE transitions (`engine/transition_update.py`), DiffusionNFT on clean samples
        # (`engine/clean_update.py`), Diffusion-DPO on preference pairs (`engine/pair_update.py`)
        return self._update_for(loss_spec(self.config.diffusion_loss.loss_mode).trains_on)(self, batch)

    def refresh_old_policy(self, decay: float) -> dict[str, float]:
        """`θ_old ← decay·θ_old + (1 − decay)·θ` (a loss that reads the old velocity; decay 0 copies θ).

        Returns:
            `{"actor/old_policy_decay": decay, "actor/old_policy_gap_before": max |θ − θ_old| before the refresh}`.

        Raises:
            ValueError: the loss has no old policy (`actor.diffusion_loss.loss_mode` does not read the old velocity).
        """
        if self.old_policy is None:
            raise ValueError(
                f"refresh_old_policy: actor.diffusion_loss.loss_mode={self.config.diffusion_loss.loss_mode!r} keeps no "
                "old policy"
            )
        gap = self.old_policy.max_abs_diff()
        self.old_policy.refresh(decay)
        return {"actor/old_policy_decay": float(decay), "actor/old_policy_gap_before": gap}

    def _check_on_policy(self, n: int) -> None:
        """Old log-probs may come from the update's own forwards only when every forward sees the old weights."""
        mini = self.config.ppo_mini_batch_size * self._group_size // self.world_size
        if self.config.ppo_epochs != 1 or mini < n:
            raise ValueError(
                "update_policy: batch lacks 'old_log_probs', and the update is not on-policy (actor.ppo_epochs="
                f"{self.config.ppo_epochs}, {n} local samples in mini-batches of {mini}): later optimizer steps "
                "would see changed weights; pass old_log_probs (engine.compute_log_prob) or use one epoch and one "
                "mini-batch"
            )

    def _clip_and_step(self) -> torch.Tensor:
        params = [p for p in self.module.parameters() if p.requires_grad]
        grad_norm = torch.nn.utils.clip_grad_norm_(params, self.config.optim.clip_grad)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        grad_norm = grad_norm.to(self.device)
        if torch.isfinite(grad_norm):  # one host sync per optimizer step
            self._optimizer_state_to(self.device)
            self.optimizer.step()
            self._optimizer_state_to("cpu")
        self.lr_scheduler.step()
        self.global_step += 1
        return grad_norm.detach().float()

    def _optimizer_state_to(self, device: str | torch.device) -> None:
        if not self.config.fsdp_config.optimizer_offload or self.config.fsdp_config.cpu_offload:
            return
        to_accelerator = torch.device(device).type != "cpu"  # host-to-device copies may overlap, D2H ones not
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and key != "step":
                    state[key] = value.to(device, non_blocking=to_accelerator)

    # ---- weights out, checkpoints -------------------------------------------------------------------------

    def export_weights(
        self, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
    ) -> dict[str, torch.Tensor]:
        """LoRA tensors (LoRA training) or the full weights (full fine-tuning), unsharded, on `device`.

        With an old policy (a loss that reads the old velocity, DiffusionNFT) these are θ_old's tensors: the rollout
        samples with the old policy.

        A collective: every rank calls it and gets the same dict (see `verl_omni.engine.lora.export_weights`):
        a snapshot packed in one flat buffer (pinned host memory from a GPU). The engine keeps that buffer and
        reuses it for a later export only once no tensor of the earlier result is referenced any more.
        """
        if self._export_buffer is None:
            self._export_buffer = ExportBuffer()
        # a loss with an old policy (DiffusionNFT) samples with θ_old, as upstream's recipe (`rollout_adapter: old`)
        policy = self.old_policy.active() if self.old_policy is not None else contextlib.nullcontext()
        with policy:
            return export_weights(
                self.module, lora_only=self.use_lora, dtype=dtype, device=device, buffer=self._export_buffer
            )

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Save `actor.checkpoint.save_contents` (model, optimizer, extra = step/LR/RNG) with DCP under `path`."""
        save_engine_checkpoint(
            path,
            model=self.module,
            optimizer=self.optimizer,
            lr_scheduler=self.lr_scheduler,
            step=self.global_step,
            contents=list(self.config.checkpoint.save_contents),
        )
        if self.old_policy is not None and "model" in self.config.checkpoint.save_contents:
            self.old_policy.save(Path(path) / "old_policy")

    def load_checkpoint(self, path: str | os.PathLike) -> int:
        """Load `actor.checkpoint.load_contents` from `path`; return (and restore) the saved optimizer step."""
        step = load_engine_checkpoint(
            path,
            model=self.module,
            optimizer=self.optimizer,
            lr_scheduler=self.lr_scheduler,
            contents=self.config.checkpoint.resolved_load_contents,
        )
        if self.old_policy is not None and "model" in self.config.checkpoint.resolved_load_contents:
            self.old_policy.load(Path(path) / "old_policy")
        if step is not None:
            self.global_step = step
        return self.global_step
