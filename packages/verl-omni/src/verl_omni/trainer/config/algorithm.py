"""`algorithm.*`: the FlowGRPO advantage estimator and where the old log-probs come from."""

from __future__ import annotations

import dataclasses
from typing import Literal

from verl_core.config import BaseConfig

__all__ = ["DiffusionAlgoConfig", "RolloutCorrectionConfig"]


@dataclasses.dataclass
class RolloutCorrectionConfig(BaseConfig):
    """`algorithm.rollout_correction.*`: where the old log-probs come from (recompute, fused or bypass mode).

    Truncated importance sampling (`rollout_is: token`) corrects the staleness of `trainer.mode: separate`;
    rejection sampling (`rollout_rs`) and batch-normalised weights are not implemented.

    Args:
        bypass_mode (`bool`, *optional*, defaults to `False`): where the old log-probs come from.
            `False`: the actor recomputes the old log-probs on the stored trajectory before the update (the
            default). `True`: the rollout's log-probs are the old ones and the recompute is skipped. Caveat: with
            a bf16 rollout the numerical rollout/training mismatch alone is ~1e-5..1e-4 per step, the size of the
            1e-4 clip range, so the first update clips a large share of samples (37-40 % measured on the SD3
            workload); use it with an fp32 rollout or a wider `actor.diffusion_loss.clip_ratio`.
        fuse_on_policy_old_log_prob (`bool`, *optional*, defaults to `True`): skip the separate recompute when
            the update is on-policy (`actor.ppo_epochs` 1 and each rank's share of the batch is one mini-batch,
            i.e. `actor.ppo_mini_batch_size` >= `data.train_batch_size`) and `bypass_mode` is off: the update then
            takes the old log-probs from its own forwards (detached), the values the recompute would give, with no
            extra pass. `False`: always run the separate recompute. When the update is not on-policy the recompute
            runs whatever this says.
        loss_type (`str`, *optional*, defaults to `"ppo_clip"`): only `"ppo_clip"`.
        rollout_is (`str`, *optional*): null, or `"token"`: in `trainer.mode: separate` each trained SDE step of a
            group generated `lag >= 1` weight versions ago is weighted by `min(exp(ℓ_old − ℓ_rollout),
            rollout_is_threshold)`, ℓ_old the actor's recompute under its current weights (the proximal policy of
            the clipped ratio) and ℓ_rollout the rollout's (the behaviour policy); groups of lag 0 weigh exactly 1,
            so an on-policy step equals the colocated update. It turns the fused old-log-prob path off.
        rollout_is_threshold (`float`, *optional*, defaults to `2.0`): the truncation of the importance weights (> 0).
        rollout_is_batch_normalize (`bool`, *optional*, defaults to `False`): must be false.
        rollout_rs (`str`, *optional*): must be null (rejection sampling is not implemented).
        rollout_rs_threshold (`float` or `str`, *optional*): unused while `rollout_rs` is null.
    """

    bypass_mode: bool = False
    fuse_on_policy_old_log_prob: bool = True
    loss_type: Literal["ppo_clip"] = "ppo_clip"
    rollout_is: str | None = None
    rollout_is_threshold: float = 2.0
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: float | str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(
            "rollout_is",
            self.rollout_is in (None, "token"),
            "null or 'token' (per SDE step; sequence-level weights are not implemented)",
        )
        self._require("rollout_is_threshold", self.rollout_is_threshold > 0, "a float > 0")
        self._require(
            "rollout_is_batch_normalize",
            not self.rollout_is_batch_normalize,
            "false (importance-sampling correction is not implemented)",
        )
        self._require("rollout_rs", self.rollout_rs is None, "null (rejection-sampling correction is not implemented)")


@dataclasses.dataclass
class DiffusionAlgoConfig(BaseConfig):
    """`algorithm.*`: the advantage estimator of FlowGRPO (flowgrpo_math.md §3).

    `A_i = (R_i − mean_group(R)) / (std + 1e-4)`, with one std over the batch (`global_std`) or per group; the
    unbiased std over the `(B, K)` advantage matrix, as verl-omni computes it.

    Args:
        trainer_type (`str`, *optional*, defaults to `"policy_gradient"`): `"policy_gradient"`, or upstream's
            `"direct_preference"` for a loss that trains on clean samples (`diffusion_nft`; the root config checks it).
        sample_source (`str`, *optional*, defaults to `"online"`): only `"online"` (fresh rollouts every step).
        adv_estimator (`str`, *optional*, defaults to `"flow_grpo"`): `"flow_grpo"`, `"diffusion_nft"` (the same
            group advantage, one per sample), `"dpo"` (best-vs-worst pairs per group instead of advantages), or
            `"mix_grpo"` / `"dance_grpo"` (FlowGRPO's, under upstream's names); the
            shipped YAML reads it from `actor_rollout_ref.model.algorithm`.
        norm_adv_by_std_in_grpo (`bool`, *optional*, defaults to `True`): divide by the std; `False` is Dr.GRPO.
        global_std (`bool`, *optional*, defaults to `True`): one std over the batch (`False`: per group).
        timestep_fraction (`float`, *optional*, defaults to `1.0`): for a loss that trains on clean samples
            (`diffusion_nft`), the share in (0, 1] of the sampler's timesteps trained per sample (a random subset of
            `max(1, ⌊T·fraction⌋)`); for a loss on SDE transitions (DanceGRPO), the share of each sample's `K` stored
            SDE steps it trains (a random subset of `max(1, ⌊K·fraction⌋)`, drawn per step; 1.0 trains every step).
        adv_mode (`str`, *optional*, defaults to `"continuous"`): DiffusionNFT's advantage mode after the clip to
            ±`adv_clip_max`: `continuous`, `positive_only`, `negative_only`, `one_only`, `binary`.
        old_policy_decay_schedule (`str`, *optional*, defaults to `"copy"`): DiffusionNFT's old-policy EMA decay
            per step: `copy` (0), `linear_to_0_5`, `delayed_linear_to_0_999` (`verl_omni.algos.old_policy_decay`).
        old_policy_decay (`float`, *optional*): a fixed decay in [0, 1) that overrides the schedule.
        old_policy_update_interval (`int`, *optional*, defaults to `1`): refresh the old policy after every this
            many training steps (`θ_old ← d·θ_old + (1 − d)·θ`).
        paired_preference (`bool`, *optional*, defaults to `False`): upstream's flag for a loss on (chosen, rejected)
            pairs; `dpo` always pairs (either value), and `true` is refused with any other loss.
        rollout_correction (`RolloutCorrectionConfig`): the old-log-prob source: recompute, fused into an on-policy
            update, or the rollout's (bypass mode).
    """

    trainer_type: Literal["policy_gradient", "direct_preference"] = "policy_gradient"
    sample_source: Literal["online"] = "online"
    adv_estimator: Literal["flow_grpo", "diffusion_nft", "dpo", "mix_grpo", "dance_grpo"] = "flow_grpo"
    norm_adv_by_std_in_grpo: bool = True
    global_std: bool = True
    timestep_fraction: float = 1.0
    adv_mode: Literal["continuous", "positive_only", "negative_only", "one_only", "binary"] = "continuous"
    old_policy_decay_schedule: Literal["copy", "linear_to_0_5", "delayed_linear_to_0_999"] = "copy"
    old_policy_decay: float | None = None
    old_policy_update_interval: int = 1
    paired_preference: bool = False
    rollout_correction: RolloutCorrectionConfig = dataclasses.field(default_factory=RolloutCorrectionConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("timestep_fraction", 0 < self.timestep_fraction <= 1, "a float in (0, 1]")
        self._require(
            "old_policy_decay",
            self.old_policy_decay is None or 0 <= self.old_policy_decay < 1,
            "null (use old_policy_decay_schedule) or a float in [0, 1)",
        )
        self._require("old_policy_update_interval", self.old_policy_update_interval >= 1, "an int >= 1")
