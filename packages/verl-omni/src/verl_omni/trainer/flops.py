"""Model FLOPs of each stage of a training step, and its MFU: `perf/flops/<stage>` and `perf/mfu/<stage>`.

The forward FLOPs of one sample come from the transformer's config (`verl_omni.models.flops`); a stage's FLOPs are
that times the forwards it runs on the step's batch of `B` trajectories (Wan: videos, their tokens over the latent
frames of the trajectory's `num_frames`), each `T` sampling steps, `K` of them trained
(`log_probs` is `(B, K)`; DanceGRPO's `train_step_mask` counts only its trained entries), `c` = 2 forwards per step
with classifier-free guidance (a guidance scale > 1 and negative embeddings in the batch), else 1:

    gen           B · T · c forwards (the rollout's whole sampling loop)
    old_log_prob  B · K · c forwards (only when the recompute runs: not fused, not bypassed)
    ref           B · K · c forwards (the reference: the adapter-disabled model with LoRA, the frozen copy without)
    update_actor  B · K · c · ppo_epochs · (forward + backward)

`K` is what the update trains: MixGRPO's window (its `log_probs` are the window's `K` steps) and DanceGRPO's subset
(`train_step_mask`) are counted as trained, the rest of the rollout's grid only in `gen`. The backward of full
fine-tuning is 2 forwards (input and weight gradients of every matmul). With LoRA the base weights are frozen: a
linear layer's backward is its input gradient only (1× its forward), attention's backward is still 2× its forward
(`dQ, dK, dV` from `dA` and `dS`), LoRA's own small matmuls are not counted. These are model FLOPs: gradient
checkpointing's recomputed forwards are not counted.

A loss that trains on clean samples (`trains_on="clean"`, DiffusionNFT) runs its whole update inside `update_actor`,
on `B` rows each with `K'` trained timesteps (`train_timesteps` `(B, K')`), every forward without CFG (conditional
embeddings only): `B · K'` no-grad forwards of the old policy (`old_velocity`), `B · K'` of the reference when
`diffusion_loss.ref_kl_coef > 0`, and `ppo_epochs · B · K' · (forward + backward)`. A loss on preference pairs
(`trains_on="pairs"`, online Diffusion-DPO) trains the `2P` chosen/rejected rows the trainer picked (the update's
batch, not the rollout's) at one noise level each, without CFG: `2P` no-grad reference forwards and
`ppo_epochs · 2P · (forward + backward)`.

MFU = FLOPs / (stage seconds · devices · `trainer.peak_tflops` · 1e12); the step's MFU divides the summed FLOPs by
the whole step's time. No MFU is logged on the CPU or with `trainer.peak_tflops: null`.
"""

from __future__ import annotations

import logging
import pathlib
from typing import Any

from tensordict import TensorDict

from verl_omni.models.flops import ForwardFlops, forward_flops, image_tokens, supported_models

__all__ = ["StageFlops", "batch_geometry"]

logger = logging.getLogger(__name__)

_STAGES = ("gen", "old_log_prob", "ref", "update_actor")
_UPDATES = ("transitions", "clean", "pairs")


def _first(batch: TensorDict, key: str) -> float:
    value = batch[key]
    return float(value.flatten()[0].item()) if hasattr(value, "flatten") else float(value)


def batch_geometry(
    batch: TensorDict, model: str, transformer_config: dict, vae_scale: int, *, temporal_scale: int | None = None
) -> dict[str, Any]:
    """Tokens and forwards per sampling step of a trajectory batch.

    Args:
        batch (`TensorDict`): trajectories (`height`, `width`, `prompt_embeds`, ...; a video's `num_frames`).
        model (`str`): the adapter name.
        transformer_config (`dict`): the transformer's `config.json`.
        vae_scale (`int`): pixels per latent cell.
        temporal_scale (`int`, *optional*): video frames per latent frame (a video adapter's
            `vae_scale_factor_temporal`); read with the batch's `num_frames` (a video trajectory's key).

    Returns:
        `dict`: `image_tokens` (Wan: video tokens), `text_tokens` (the prompt embedding's length),
        `negative_text_tokens` (None without CFG), `cfg` (forwards per step: 2 with guidance > 1 and negative
        embeddings, else 1), `rows`, `trained` (trained sample-steps: `train_step_mask.sum()`, or `B · K`; 0 without
        `log_probs`) and `steps`.
    """
    keys = set(batch.keys())
    height, width = int(_first(batch, "height")), int(_first(batch, "width"))
    frames = int(_first(batch, "num_frames")) if "num_frames" in keys else 1
    neg = "negative_prompt_embeds" in keys and "guidance_scale" in keys and _first(batch, "guidance_scale") > 1
    if "train_step_mask" in keys:
        trained = int(batch["train_step_mask"].sum().item())
    elif "log_probs" in keys:
        trained = batch["log_probs"].shape[0] * batch["log_probs"].shape[1]
    else:
        trained = 0
    return {
        "image_tokens": image_tokens(
            model, transformer_config, height, width, vae_scale, num_frames=frames, temporal_scale=temporal_scale
        ),
        "text_tokens": int(batch["prompt_embeds"].shape[1]),
        "negative_text_tokens": int(batch["negative_prompt_embeds"].shape[1]) if neg else None,
        "cfg": 2 if neg else 1,
        "rows": batch.batch_size[0],
        "trained": trained,
        "steps": int(_first(batch, "num_inference_steps")),
    }


class StageFlops:
    """Per-step `perf/flops/*` and `perf/mfu/*` of a trainer run (see the module docstring for the count).

    Args:
        model (`str`): the adapter name (`sd3`, `qwen_image`, `flux`, `wan`).
        transformer_config (`dict`): the transformer's `config.json`.
        vae_scale (`int`): pixels per latent cell.
        temporal_scale (`int`, *optional*): video frames per latent frame (Wan's VAE: 4); None for image models.
        lora (`bool`): the base weights are frozen (LoRA): the cheaper backward.
        ppo_epochs (`int`): passes of the update over the batch.
        trains_on (`str`, *optional*, defaults to `"transitions"`): what the loss trains on (`LossSpec.trains_on`):
            `"transitions"`, `"clean"` or `"pairs"`; picks the `update_actor` count (see the module docstring).
        old_forward (`bool`, *optional*, defaults to `False`): a `"clean"` update also runs the old policy's forwards.
        ref_forward (`bool`, *optional*, defaults to `False`): a `"clean"` update also runs the reference's forwards
            (a `"pairs"` update always does).
        devices (`int`): devices the stages run on (the actor ranks; the colocated rollout shares them).
        peak_tflops (`float`, *optional*): dense peak of one device in TFLOP/s; None logs FLOPs only.
    """

    def __init__(
        self,
        model: str,
        transformer_config: dict,
        vae_scale: int,
        *,
        lora: bool,
        ppo_epochs: int = 1,
        trains_on: str = "transitions",
        old_forward: bool = False,
        ref_forward: bool = False,
        devices: int = 1,
        peak_tflops: float | None = None,
        temporal_scale: int | None = None,
    ) -> None:
        self.model, self.transformer_config, self.vae_scale = model, dict(transformer_config), int(vae_scale)
        self.temporal_scale = temporal_scale
        if trains_on not in _UPDATES:
            raise ValueError(f"StageFlops: trains_on must be one of {list(_UPDATES)}, got {trains_on!r}")
        self.lora, self.ppo_epochs, self.trains_on = lora, ppo_epochs, trains_on
        self.old_forward, self.ref_forward = old_forward, ref_forward or trains_on == "pairs"
        self.devices, self.peak_tflops = devices, peak_tflops

    @classmethod
    def for_folder(cls, path: str | pathlib.Path, **kwargs: Any) -> StageFlops | None:
        """A counter for the pipeline folder `path`; None (logged once) when its model or variant has no formula."""
        from verl_omni.models import adapter_for_folder

        adapter = adapter_for_folder(path)
        if adapter.name not in supported_models():
            logger.info("perf/flops: no FLOPs formula for model %r; FLOPs and MFU are not logged", adapter.name)
            return None
        try:  # a variant the formula refuses (Wan image-to-video) is found here, not at the first step
            forward_flops(adapter.name, adapter.transformer_config, image_tokens=1, text_tokens=1)
        except ValueError as e:
            logger.info("perf/flops: %s; FLOPs and MFU are not logged", e)
            return None
        temporal = getattr(adapter, "vae_scale_factor_temporal", None)  # video adapters only (Wan)
        return cls(adapter.name, adapter.transformer_config, adapter.vae_scale_factor, temporal_scale=temporal,
                   **kwargs)  # fmt: skip

    @classmethod
    def for_config(cls, config: Any, device: str) -> StageFlops | None:
        """The counter of a `DiffusionTrainerConfig` whose actor ranks run on `device` (MFU only on `cuda`)."""
        from verl_omni.algos import loss_spec

        model, actor, trainer = config.actor_rollout_ref.model, config.actor_rollout_ref.actor, config.trainer
        spec = loss_spec(actor.diffusion_loss.loss_mode)
        return cls.for_folder(
            model.path,
            lora=model.use_lora,
            ppo_epochs=actor.ppo_epochs,
            trains_on=spec.trains_on,
            old_forward="old_velocity" in spec.needs,
            ref_forward=actor.diffusion_loss.ref_kl_coef > 0,
            devices=trainer.nnodes * trainer.n_gpus_per_node,
            peak_tflops=trainer.peak_tflops if device == "cuda" else None,
        )

    def _step_forward(self, g: dict[str, Any]) -> ForwardFlops:
        """FLOPs of one sampling step of one sample: the conditional forward (+ the unconditional one with CFG)."""
        one = forward_flops(self.model, self.transformer_config, image_tokens=g["image_tokens"],
                            text_tokens=g["text_tokens"])  # fmt: skip
        if g["negative_text_tokens"] is not None:
            one = one + forward_flops(self.model, self.transformer_config, image_tokens=g["image_tokens"],
                                      text_tokens=g["negative_text_tokens"])  # fmt: skip
        return one

    def stage_flops(
        self, batch: TensorDict, stages: set[str] | list[str], update_batch: TensorDict | None = None
    ) -> dict[str, float]:
        """FLOPs (all devices together) of each of `stages` that ran on `batch` (the step's trajectories).

        `update_batch` is what the update trained on when that is not `batch` (online DPO: the chosen/rejected rows).
        """
        g = batch_geometry(batch, self.model, self.transformer_config, self.vae_scale,
                           temporal_scale=self.temporal_scale)  # fmt: skip
        step = self._step_forward(g)
        out: dict[str, float] = {}
        if "gen" in stages:
            out["gen"] = g["rows"] * g["steps"] * step.total
        for stage in ("old_log_prob", "ref"):
            if stage in stages and g["trained"]:
                out[stage] = g["trained"] * step.total
        if "update_actor" in stages:
            update = self._update_flops(g, step, batch if update_batch is None else update_batch)
            if update:
                out["update_actor"] = update
        return out

    def _backward(self, one: ForwardFlops) -> float:
        """The backward of `one`: 2× it with trainable base weights; with LoRA the linears 1×, attention 2×."""
        return one.linear * (1 if self.lora else 2) + one.attention * 2

    def update_forwards(self, g: dict[str, Any], update_batch: TensorDict) -> tuple[int, int]:
        """`(no-grad forwards, trained forwards)` of the update, each of one row at one step (see the module docstring).

        Args:
            g (`dict`): `batch_geometry` of the step's batch.
            update_batch (`TensorDict`): what the update trained on (the step's batch, or online DPO's pairs).
        """
        if self.trains_on == "transitions":
            return 0, self.ppo_epochs * g["trained"]
        if self.trains_on == "clean":
            if "train_timesteps" not in update_batch.keys():  # noqa: SIM118 - a TensorDict's keys
                return 0, 0
            terms = update_batch["train_timesteps"].numel()  # B · K'
        else:
            terms = update_batch.batch_size[0]  # 2P rows, one noise level each
        no_grad = int(self.old_forward and self.trains_on == "clean") + int(self.ref_forward)
        return no_grad * terms, self.ppo_epochs * terms

    def _update_flops(self, g: dict[str, Any], step: ForwardFlops, update_batch: TensorDict) -> float:
        """FLOPs of the `update_actor` stage; 0 when the batch holds nothing it trains."""
        if self.trains_on != "transitions":  # every forward unguided, on the conditional embeddings
            step = forward_flops(self.model, self.transformer_config, image_tokens=g["image_tokens"],
                                 text_tokens=int(update_batch["prompt_embeds"].shape[1]))  # fmt: skip
        no_grad, trained = self.update_forwards(g, update_batch)
        return no_grad * step.total + trained * (step.total + self._backward(step))

    def metrics(
        self, batch: TensorDict, timing: dict[str, float], update_batch: TensorDict | None = None
    ) -> dict[str, float]:
        """`perf/flops/<stage>` for the stages in `timing`, and `perf/mfu/<stage>` + `perf/mfu/step` with a peak.

        `update_batch`: what the update trained on when that is not `batch` (online DPO's pairs).
        """
        flops = self.stage_flops(batch, [s for s in _STAGES if s in timing], update_batch)
        out = {f"perf/flops/{k}": v for k, v in flops.items()}
        if flops:
            out["perf/flops/step"] = sum(flops.values())
        if self.peak_tflops:
            peak = self.peak_tflops * 1e12 * self.devices
            for stage, value in flops.items():
                if timing.get(stage, 0) > 0:
                    out[f"perf/mfu/{stage}"] = value / (timing[stage] * peak)
            if flops and timing.get("step", 0) > 0:
                out["perf/mfu/step"] = sum(flops.values()) / (timing["step"] * peak)
        return out
