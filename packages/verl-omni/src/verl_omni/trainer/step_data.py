"""Per-step data of `FlowGRPOTrainer`: the step's sampling plan, the batch each loss trains on, the step's metrics.

`StepDataMixin` holds the pure per-step helpers of the trainer (no worker calls): the SDE window pinned per step
(`_step_sampling`, `_plan`, `_resume_window`), the batches of a loss on clean samples (`_prepare_clean_batch`) and
of online DPO (`_prepare_pair_batch`), DanceGRPO's step subsets (`_train_step_mask`) and the `critic/*`, `perf/*`,
`timing_s/*` metrics of a step (`_step_metrics`). Every random draw is seeded by the run seed and the step, so a
resumed run draws the same.
"""

from __future__ import annotations

import random
from typing import Any, cast

import torch
from tensordict import TensorDict

from verl_omni.algos import apply_adv_mode, dpo_train_sigmas, select_preference_pairs, select_train_timesteps
from verl_omni.algos.dance_grpo import timestep_subset_mask
from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.rollout import pin_sde_window

__all__ = ["STEP_SEED_STRIDE", "StepDataMixin"]

STEP_SEED_STRIDE = 1_000_003
"""> prompts x n of any step: request seeds of two steps never overlap."""


class StepDataMixin:
    """The per-step helpers of `FlowGRPOTrainer` (uses its `config`, `seed`, `window`, `step`, `_flops`...)."""

    def _prepare_clean_batch(self: Any, batch: TensorDict, step: int) -> None:
        """A loss on clean samples: advantages after `algorithm.adv_mode`, and each row's trained timesteps.

        `train_timesteps` `(B, max(1, ⌊N·timestep_fraction⌋))` is a random subset of the sampler's grid per row,
        drawn from the run seed and the step (a resumed run draws the same).
        """
        algo = self.config.algorithm
        clip = self.config.actor_rollout_ref.actor.diffusion_loss.adv_clip_max
        batch["advantages"] = apply_adv_mode(batch["advantages"], algo.adv_mode, clip)
        gen = torch.Generator().manual_seed(self.seed + step * STEP_SEED_STRIDE)
        batch["train_timesteps"] = select_train_timesteps(batch["timesteps"], algo.timestep_fraction, gen)

    def _prepare_pair_batch(self: Any, batch: TensorDict, rewards: torch.Tensor, step: int) -> TensorDict:
        """Online Diffusion-DPO: each group's best and worst sample as adjacent rows, one shared ε and σ per pair.

        ε ~ N(0, I) and σ (`dpo_train_sigmas`: logit-normal on the 1000-step training table) are drawn from the run
        seed and the step (a resumed run draws the same).
        """
        rows = select_preference_pairs(torch.as_tensor(rewards), batch["prompt_index"])
        pairs = batch[rows]
        gen = torch.Generator().manual_seed(self.seed + step * STEP_SEED_STRIDE)
        x0 = pairs["latents_clean"]
        n_pairs = rows.numel() // 2
        noise = torch.randn((n_pairs, *x0.shape[1:]), generator=gen, dtype=torch.float32)
        pairs["dpo_noise"] = noise.repeat_interleave(2, dim=0).to(x0.device)
        pairs["dpo_sigma"] = dpo_train_sigmas(n_pairs, gen).repeat_interleave(2).to(x0.device)
        return pairs

    def _step_sampling(self: Any, step: int) -> tuple[DiffusionSamplingConfig, int]:
        """The step's sampling config with the SDE window pinned to `[start, start + K]`, and `start`."""
        if not self.window:
            return self.train_sampling, 0
        algo = self.config.actor_rollout_ref.rollout.algo
        sampling = pin_sde_window(
            self.train_sampling,
            step,
            algo.sde_window_seed,
            strategy=algo.sample_strategy,
            iters_per_group=algo.iters_per_group,
        )
        return sampling, cast(list[int], sampling.sde_window_range)[0]  # `pin_sde_window` always sets it

    def _plan(self: Any, step: int) -> tuple[DiffusionSamplingConfig, int, int]:
        """Step `step`'s sampling config, SDE window start and request seed (separate mode's producer draws them)."""
        sampling, start = self._step_sampling(step)
        return sampling, start, self.seed + step * STEP_SEED_STRIDE

    def _train_step_mask(self: Any, batch: TensorDict, step: int) -> torch.Tensor:
        """DanceGRPO's per-sample subset of the `K` stored steps (`algorithm.timestep_fraction`), `(B, K)` bool.

        Drawn from the run seed and the step only, so a resumed run draws the same subsets.
        """
        seed = random.Random(f"timestep-subset/{self.seed}/{step}").getrandbits(63)
        rows, k = batch["log_probs"].shape
        return timestep_subset_mask(
            rows, k, self.config.algorithm.timestep_fraction, torch.Generator().manual_seed(seed)
        )

    def _resume_window(self: Any, saved: int | None) -> None:
        """Restore the checkpointed window start; the schedule must place the checkpoint's step there again.

        Raises:
            ValueError: the window schedule (`rollout.algo.sample_strategy`, `sde_window_*`, `iters_per_group`) puts
                the checkpoint's step elsewhere than the checkpoint recorded.
        """
        now = self._step_sampling(self.step)[1] if self.window and self.step > 0 else None
        if saved is not None and now is not None and int(saved) != now:
            raise ValueError(
                f"actor_rollout_ref.rollout.algo.sample_strategy: the checkpoint of step {self.step} recorded the SDE "
                f"window start {saved}, but this config's window schedule places step {self.step} at {now}; resume "
                "with the checkpoint's sample_strategy / sde_window_size / sde_window_range / sde_window_seed / "
                "iters_per_group, or start a new run in another trainer.default_local_dir"
            )
        self.window_start = now

    def _step_metrics(
        self: Any,
        batch: TensorDict,
        rewards: torch.Tensor,
        reward_metrics: dict[str, float],
        start: int,
        timing: dict[str, float],
        step: int,
        train_batch: TensorDict | None = None,
    ) -> dict[str, float]:
        c = self._components()
        r = rewards.double()
        adv = batch["advantages"].double()
        index = batch["prompt_index"]
        groups = [r[index == g] for g in index.unique()]
        zero_std = sum(bool((g == g[0]).all()) for g in groups) / len(groups)
        images = batch.batch_size[0]
        metrics = {
            "critic/rewards/mean": r.mean().item(),
            "critic/rewards/std": r.std().item() if images > 1 else 0.0,
            "critic/rewards/max": r.max().item(),
            "critic/rewards/min": r.min().item(),
            "critic/rewards/zero_std_ratio": zero_std,
            "critic/advantages/mean": adv.mean().item(),
            "critic/advantages/max": adv.max().item(),
            "critic/advantages/min": adv.min().item(),
            "rollout/sde_window_start": float(start),
            "training/global_step": float(step),
            "training/epoch": float(c.prompts.epoch),
            "perf/images_per_step": float(images),
            "perf/throughput": images / timing["step"],
        }
        metrics.update(reward_metrics)  # already prefixed `reward/`
        metrics.update({f"timing_s/{k}": v for k, v in timing.items()})
        for key in ("gen", "reward", "old_log_prob", "ref", "update_actor"):
            if key in timing:
                metrics[f"timing_per_image_ms/{key}"] = 1000 * timing[key] / images
        if self._flops is not None:
            metrics.update(self._flops.metrics(batch, timing, train_batch))  # online DPO: the update trains pairs
        return metrics
