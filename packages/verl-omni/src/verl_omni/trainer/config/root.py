"""`DiffusionTrainerConfig`: the root of the `diffusion_trainer` config and its cross-key checks."""

from __future__ import annotations

import dataclasses

from verl_core.config import BaseConfig, ConfigValueError
from verl_omni.algos import loss_spec
from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig, DiffusionRefConfig, DiffusionRolloutConfig
from verl_omni.data import DataConfig
from verl_omni.reward import RewardConfig
from verl_omni.reward.manager import REWARD_MANAGERS, unknown_reward_manager
from verl_omni.trainer.config.algorithm import DiffusionAlgoConfig
from verl_omni.trainer.config.trainer import RayKwargsConfig, TrainerConfig

__all__ = ["ActorRolloutRefConfig", "DiffusionTrainerConfig"]


@dataclasses.dataclass
class ActorRolloutRefConfig(BaseConfig):
    """`actor_rollout_ref.*`: the model, the actor (policy update), the reference and the rollout.

    Args:
        model (`DiffusionModelConfig`): the diffusers pipeline folder, LoRA, gradient checkpointing.
        actor (`DiffusionActorConfig`): the FlowGRPO update on `DiffusersFSDPEngine`.
        ref (`DiffusionRefConfig`): the reference policy (KL term); with LoRA it is the actor with adapters off.
        rollout (`DiffusionRolloutConfig`): the rollout backend and its sampling settings.
        hybrid_engine (`bool`, *optional*, defaults to `True`): colocated mode: each actor rank and one rollout
            server share a device (a placement-group bundle); the rollout sleeps while the actor trains.
        nccl_timeout (`int`, *optional*, defaults to `600`): seconds of the actor ranks' process-group timeout.
    """

    model: DiffusionModelConfig = dataclasses.field(default_factory=DiffusionModelConfig)
    actor: DiffusionActorConfig = dataclasses.field(default_factory=DiffusionActorConfig)
    ref: DiffusionRefConfig = dataclasses.field(default_factory=DiffusionRefConfig)
    rollout: DiffusionRolloutConfig = dataclasses.field(default_factory=DiffusionRolloutConfig)
    hybrid_engine: bool = True
    nccl_timeout: int = 600

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(
            "hybrid_engine",
            self.hybrid_engine,
            "true (colocated rollout and training; a separate rollout pool is not implemented)",
        )
        self._require("nccl_timeout", self.nccl_timeout > 0, "seconds > 0")


@dataclasses.dataclass
class DiffusionTrainerConfig(BaseConfig):
    """The whole `diffusion_trainer` config (`verl_omni/trainer/config/diffusion_trainer.yaml`).

    Args:
        actor_rollout_ref (`ActorRolloutRefConfig`): model, actor, reference, rollout.
        data (`DataConfig`): prompt files and batch sizes.
        reward (`RewardConfig`): the reward function and its workers.
        algorithm (`DiffusionAlgoConfig`): the advantage estimator and the old-log-prob source.
        trainer (`TrainerConfig`): steps, logging, checkpoints, resources, timeouts.
        ray_kwargs (`RayKwargsConfig`): how to start or join Ray.

    Raises:
        ConfigValueError: keys that disagree with each other (each message names both keys and the way out):
            `actor.rollout_n` vs `rollout.n`, `model.algorithm` vs `algorithm.adv_estimator`, a loopback
            `rollout.host` with `trainer.nnodes > 1`, batch sizes that do not split over the actor ranks or into
            mini-batches, an `actor.diffusion_loss.loss_mode` with a `rollout.algo.sde_type` it does not hold for
            or (when it needs the old transition means, `grpo_guard`) with `rollout_correction.bypass_mode=true`.
    """

    actor_rollout_ref: ActorRolloutRefConfig = dataclasses.field(default_factory=ActorRolloutRefConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    reward: RewardConfig = dataclasses.field(default_factory=RewardConfig)
    algorithm: DiffusionAlgoConfig = dataclasses.field(default_factory=DiffusionAlgoConfig)
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    ray_kwargs: RayKwargsConfig = dataclasses.field(default_factory=RayKwargsConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        arr = self.actor_rollout_ref
        actor, n = arr.actor, arr.rollout.n
        _check(
            actor.rollout_n == n,
            "actor_rollout_ref.actor.rollout_n",
            f"{actor.rollout_n} differs from actor_rollout_ref.rollout.n={n}; leave actor.rollout_n unset (it "
            "follows rollout.n) or set both to the group size",
        )
        _check(
            arr.model.algorithm == self.algorithm.adv_estimator,
            "algorithm.adv_estimator",
            f"{self.algorithm.adv_estimator!r} differs from actor_rollout_ref.model.algorithm="
            f"{arr.model.algorithm!r}; set one algorithm in both",
        )
        _check(
            self.trainer.nnodes == 1 or arr.rollout.host not in _LOOPBACK,
            "actor_rollout_ref.rollout.host",
            f"{arr.rollout.host!r} is reachable only from its own node, but trainer.nnodes={self.trainer.nnodes}: the "
            "driver and actor rank 0 call every rollout server over HTTP; set actor_rollout_ref.rollout.host=0.0.0.0",
        )
        self._check_loss_mode()
        manager = self.reward.reward_manager.name  # checked before any worker starts, not at the first reward
        if manager not in REWARD_MANAGERS:
            raise ConfigValueError(unknown_reward_manager(manager), key="reward.reward_manager.name")
        world = self.trainer.world_size
        prompts = self.data.train_batch_size
        _check(
            prompts * n % world == 0,
            "data.train_batch_size",
            f"{prompts} prompts x rollout.n={n} = {prompts * n} images do not split over {world} actor ranks "
            f"(trainer.nnodes x trainer.n_gpus_per_node); choose a batch that is a multiple of {world}",
        )
        mini = min(actor.ppo_mini_batch_size, prompts)  # a mini-batch larger than the batch is the whole batch
        _check(
            prompts % mini == 0,
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            f"{mini} prompts must divide data.train_batch_size={prompts} (one optimizer step per mini-batch)",
        )
        _check(
            mini * n % world == 0,
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            f"{mini} prompts x rollout.n={n} images do not split over {world} actor ranks",
        )

    def _check_loss_mode(self) -> None:
        """The loss's own needs (`verl_omni.algos.loss_spec`) against the sampler and the old-log-prob source."""
        mode = self.actor_rollout_ref.actor.diffusion_loss.loss_mode
        spec = loss_spec(mode)
        sde_type = self.actor_rollout_ref.rollout.algo.sde_type
        _check(
            spec.sde_types is None or sde_type in spec.sde_types,
            "actor_rollout_ref.rollout.algo.sde_type",
            f"{sde_type!r}: actor_rollout_ref.actor.diffusion_loss.loss_mode={mode!r} holds only for sde_type in "
            f"{list(spec.sde_types or ())}; set rollout.algo.sde_type={(spec.sde_types or ('',))[0]!r} or another "
            "loss_mode",
        )
        _check(
            "old_prev_sample_mean" not in spec.needs or not self.algorithm.rollout_correction.bypass_mode,
            "algorithm.rollout_correction.bypass_mode",
            f"true: actor_rollout_ref.actor.diffusion_loss.loss_mode={mode!r} needs the old policy's transition "
            "means, which only the actor's old-log-prob pass (or the fused on-policy update) computes; bypass mode "
            "takes the rollout's log-probs and has no means; set bypass_mode=false",
        )

    @property
    def on_policy_update(self) -> bool:
        """Whether every forward of the policy update runs under the weights that sampled the batch.

        The rule `DiffusersFSDPEngine.update_policy` checks before it takes the old log-probs from its own forwards:
        `actor.ppo_epochs` is 1 and each rank's share of the batch (`data.train_batch_size × rollout.n / world
        size` images) fits in one local mini-batch (`actor.ppo_mini_batch_size × rollout.n // world size`), so the
        step makes one optimizer step. With the batch checks above this is `ppo_mini_batch_size >=
        train_batch_size`.
        """
        actor, world = self.actor_rollout_ref.actor, self.trainer.world_size
        local_batch = self.data.train_batch_size * actor.rollout_n // world
        local_mini = actor.ppo_mini_batch_size * actor.rollout_n // world
        return actor.ppo_epochs == 1 and local_mini >= local_batch

    @property
    def fuse_old_log_prob(self) -> bool:
        """Whether the trainer skips the old-log-prob recompute and the on-policy update takes them from its forwards.

        True when `algorithm.rollout_correction.fuse_on_policy_old_log_prob` is on, `bypass_mode` is off and the
        update is on-policy (`on_policy_update`).
        """
        correction = self.algorithm.rollout_correction
        return correction.fuse_on_policy_old_log_prob and not correction.bypass_mode and self.on_policy_update


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigValueError(message, key=key)
