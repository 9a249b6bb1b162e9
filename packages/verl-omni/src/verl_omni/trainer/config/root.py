"""`DiffusionTrainerConfig`: the root of the `diffusion_trainer` config and its cross-key checks."""

from __future__ import annotations

import dataclasses

from verl_core.config import BaseConfig, ConfigValueError
from verl_omni.algos import loss_spec, registered_losses, unknown_loss
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

    `actor.rollout_n` and `ref.rollout_n` follow `rollout.n`: null is filled with it, another value is refused.

    Raises:
        ConfigValueError: `hybrid_engine: false`, `nccl_timeout <= 0`, or `actor.rollout_n` / `ref.rollout_n`
            different from `rollout.n` (names both keys).
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
            "true (for a rollout on its own pool set trainer.mode=separate; hybrid_engine stays true)",
        )
        self._require("nccl_timeout", self.nccl_timeout > 0, "seconds > 0")
        n = self.rollout.n  # the one home of the group size; actor/ref.rollout_n follow it
        for role in ("actor", "ref"):
            config = getattr(self, role)
            if config.rollout_n is not None and config.rollout_n != n:
                raise ConfigValueError(
                    f"{config.rollout_n} differs from actor_rollout_ref.rollout.n={n}; leave {role}.rollout_n unset "
                    "(null: it follows rollout.n) or set both to the group size",
                    key=f"{role}.rollout_n",
                    owner=type(self).__name__,
                )
            if config.rollout_n is None:
                setattr(self, role, dataclasses.replace(config, rollout_n=n))


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
            `model.algorithm` vs `algorithm.adv_estimator`, a loopback
            `rollout.host` with `trainer.nnodes > 1`, batch sizes that do not split over the actor ranks or into
            mini-batches, an `actor.diffusion_loss.loss_mode` with a `rollout.algo.sde_type` it does not hold for
            or (when it needs the old transition means, `grpo_guard`) with `rollout_correction.bypass_mode=true`; a
            loss that trains on clean samples (`diffusion_nft`) with `bypass_mode=true`, `actor.use_kl_loss=true`,
            `ref_kl_coef > 0` and full fine-tuning, or CFG in the rollout; a loss on SDE transitions with
            `algorithm.trainer_type=direct_preference` or `adv_mode != continuous`; a loss on
            preference pairs (`dpo`) with `rollout.n < 2`, full fine-tuning, `actor.shuffle=true`, `use_kl_loss=true`
            or `ref_kl_coef > 0`, an odd
            `ppo_micro_batch_size_per_gpu`, or prompts that do not split whole over the actor ranks.
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
        self._check_algorithm_sampler()
        self._check_mode()
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

    def _check_mode(self) -> None:
        """`trainer.mode`: a separate rollout has a pool of its own, never sleeps, and is the only one IS corrects."""
        rollout, mode = self.actor_rollout_ref.rollout, self.trainer.mode
        correction = self.algorithm.rollout_correction
        if mode == "colocated":
            _check(
                correction.rollout_is is None,
                "algorithm.rollout_correction.rollout_is",
                f"{correction.rollout_is!r} corrects the staleness of trainer.mode=separate, but "
                "trainer.mode=colocated trains on-policy (lag 0, weight 1); set rollout_is=null or "
                "trainer.mode=separate",
            )
            return
        if self.trainer.separate.share_devices:
            _check(
                rollout.nnodes == 0,
                "actor_rollout_ref.rollout.nnodes",
                f"{rollout.nnodes} with trainer.separate.share_devices=true: the rollout servers sit on the actor's "
                "devices (one per actor rank), there is no rollout pool; set actor_rollout_ref.rollout.nnodes=0 or "
                "share_devices=false",
            )
        else:
            _check(
                rollout.nnodes >= 1,
                "actor_rollout_ref.rollout.nnodes",
                f"{rollout.nnodes}: trainer.mode=separate runs the rollout servers on a pool of their own; set "
                "actor_rollout_ref.rollout.nnodes >= 1 (and rollout.n_gpus_per_node servers per node), or "
                "trainer.separate.share_devices=true to put them on the actor's devices",
            )
        _check(
            not rollout.free_cache_engine,
            "actor_rollout_ref.rollout.free_cache_engine",
            "true: trainer.mode=separate keeps its rollout servers generating on their own devices, they never sleep; "
            "set actor_rollout_ref.rollout.free_cache_engine=false (or trainer.mode=colocated)",
        )
        _check(
            not self.reward.stream,
            "reward.stream",
            "true: trainer.mode=separate already scores groups apart from their generation (the actor scores what "
            "it takes from the queue); set reward.stream=false",
        )
        _check(
            not correction.bypass_mode,
            "algorithm.rollout_correction.bypass_mode",
            "true: in trainer.mode=separate the rollout's log-probs come from older weights; the clipped ratio needs "
            "the actor's own (set bypass_mode=false; rollout_is=token weights the staleness)",
        )
        rm = self.reward.reward_model
        _check(
            not (rm.enable and rm.colocated),
            "reward.reward_model.colocated",
            "true: trainer.mode=separate has no sleeping rollout to share the actor's devices with; give the reward "
            "model a pool of its own (reward.reward_model.colocated=false)",
        )

    def _check_algorithm_sampler(self) -> None:
        """Upstream's `model.algorithm: mix_grpo | dance_grpo` are FlowGRPO with their sampler: check it is set."""
        arr = self.actor_rollout_ref
        algo = arr.rollout.algo
        _check(
            arr.model.algorithm != "mix_grpo" or bool(algo.sde_window_size),
            "actor_rollout_ref.rollout.algo.sde_window_size",
            "null: actor_rollout_ref.model.algorithm='mix_grpo' trains an SDE window of K steps (ODE elsewhere); set "
            "sde_window_size (upstream's recipe: 2 with sde_window_range [0, 5]) or model.algorithm=flow_grpo",
        )
        _check(
            arr.model.algorithm != "dance_grpo" or algo.init_same_noise,
            "actor_rollout_ref.rollout.algo.init_same_noise",
            "false: actor_rollout_ref.model.algorithm='dance_grpo' shares each group's initial noise (upstream "
            "hard-codes it); set rollout.algo.init_same_noise=true or model.algorithm=flow_grpo",
        )

    def _check_loss_mode(self) -> None:
        """The loss's own needs (`verl_omni.algos.loss_spec`) against the sampler and the old-log-prob source."""
        mode = self.actor_rollout_ref.actor.diffusion_loss.loss_mode
        _check(mode in registered_losses(), "actor_rollout_ref.actor.diffusion_loss.loss_mode", unknown_loss(mode))
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
        if spec.trains_on == "pairs":  # first: its reference rules differ from the other clean-sample losses'
            self._check_pairs(mode)
        self._check_trains_on(mode, spec.needs_log_probs)
        _check(
            spec.trains_on == "pairs" or not self.algorithm.paired_preference,
            "algorithm.paired_preference",
            f"true: actor_rollout_ref.actor.diffusion_loss.loss_mode={mode!r} does not train on preference pairs; set "
            "paired_preference=false, or actor_rollout_ref.model.algorithm=dpo",
        )

    def _check_pairs(self, mode: str) -> None:
        """A loss on (chosen, rejected) pairs (`dpo`): groups of two or more, a reference, whole pairs per rank."""
        arr, world = self.actor_rollout_ref, self.trainer.world_size
        loss = f"actor_rollout_ref.actor.diffusion_loss.loss_mode={mode!r}"
        _check(
            arr.rollout.n >= 2,
            "actor_rollout_ref.rollout.n",
            f"{arr.rollout.n}: {loss} pairs the best and the worst image of each prompt group, so a group needs two "
            "or more images; set rollout.n >= 2 (upstream's recipe: 16) or another loss_mode",
        )
        _check(
            arr.model.lora_rank > 0,
            "actor_rollout_ref.model.lora_rank",
            f"0 (full fine-tuning): {loss} needs the reference velocity, which is the model with its LoRA adapters "
            "disabled; set model.lora_rank > 0 or another loss_mode",
        )
        _check(
            not arr.actor.shuffle,
            "actor_rollout_ref.actor.shuffle",
            f"true: {loss} trains adjacent (chosen, rejected) rows that must stay together; set actor.shuffle=false",
        )
        for key, value in (
            ("use_kl_loss", arr.actor.use_kl_loss),
            ("diffusion_loss.ref_kl_coef", arr.actor.diffusion_loss.ref_kl_coef),
        ):
            _check(
                not value,
                f"actor_rollout_ref.actor.{key}",
                f"{value}: {loss} is already relative to the reference (its implicit reward), so no extra reference "
                f"term applies; unset actor.{key} (tune diffusion_loss.dpo_beta instead)",
            )
        micro = arr.actor.ppo_micro_batch_size_per_gpu
        _check(
            micro is None or micro % 2 == 0,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
            f"{micro}: {loss} trains whole (chosen, rejected) pairs per micro-batch; set an even number or null",
        )
        prompts = self.data.train_batch_size
        mini = min(arr.actor.ppo_mini_batch_size, prompts)
        _check(
            prompts % world == 0 and mini % world == 0,
            "data.train_batch_size",
            f"{prompts} prompts (actor.ppo_mini_batch_size={mini}) give one pair each under {loss}, and the pairs "
            f"must split whole over {world} actor ranks; choose train_batch_size and ppo_mini_batch_size as "
            f"multiples of {world}",
        )

    def _check_trains_on(self, mode: str, transitions: bool) -> None:
        """Keys that hold only for losses on SDE transitions, or only for losses on clean samples (`LossSpec`)."""
        arr, algo = self.actor_rollout_ref, self.algorithm
        loss = f"actor_rollout_ref.actor.diffusion_loss.loss_mode={mode!r}"
        if transitions:
            for key, ok, allowed in (
                ("trainer_type", algo.trainer_type == "policy_gradient", "policy_gradient"),
                ("adv_mode", algo.adv_mode == "continuous", "continuous"),
            ):
                _check(
                    ok,
                    f"algorithm.{key}",
                    f"{getattr(algo, key)!r} holds only for a loss that trains on clean samples (diffusion_nft), but "
                    f"{loss} trains on SDE transitions; set algorithm.{key}={allowed} or another loss_mode",
                )
            return
        why = f"{loss} trains on clean samples with no log-probs"
        _check(
            not algo.rollout_correction.bypass_mode,
            "algorithm.rollout_correction.bypass_mode",
            f"true: {why}; bypass mode reuses the rollout's log-probs as the old ones and has nothing to do here; "
            "set bypass_mode=false or another loss_mode",
        )
        _check(
            not arr.actor.use_kl_loss,
            "actor_rollout_ref.actor.use_kl_loss",
            f"true: {why}, so the transition KL has no input; use actor_rollout_ref.actor.diffusion_loss.ref_kl_coef "
            "(its velocity-space reference term) and set use_kl_loss=false",
        )
        _check(
            arr.actor.diffusion_loss.ref_kl_coef == 0 or arr.model.lora_rank > 0,
            "actor_rollout_ref.actor.diffusion_loss.ref_kl_coef",
            f"{arr.actor.diffusion_loss.ref_kl_coef}: the reference velocity is the model with its LoRA adapters "
            "disabled, but actor_rollout_ref.model.lora_rank=0 trains the full weights; set lora_rank > 0 or "
            "ref_kl_coef=0",
        )
        pipeline = arr.rollout.pipeline
        _check(
            pipeline.true_cfg_scale <= 1 and (pipeline.guidance_scale or 1.0) <= 1,
            "actor_rollout_ref.rollout.pipeline.true_cfg_scale",
            f"true_cfg_scale={pipeline.true_cfg_scale}, guidance_scale={pipeline.guidance_scale}: {why} and trains "
            "without CFG, so it samples without CFG too; set rollout.pipeline.true_cfg_scale=1.0 and "
            "guidance_scale=null",
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
        n = self.actor_rollout_ref.rollout.n  # `actor.rollout_n` follows it (checked in `__post_init__`)
        local_batch = self.data.train_batch_size * n // world
        local_mini = actor.ppo_mini_batch_size * n // world
        return actor.ppo_epochs == 1 and local_mini >= local_batch

    @property
    def fuse_old_log_prob(self) -> bool:
        """Whether the trainer skips the old-log-prob recompute and the on-policy update takes them from its forwards.

        True when `algorithm.rollout_correction.fuse_on_policy_old_log_prob` is on, `bypass_mode` is off and the
        update is on-policy (`on_policy_update`), `rollout_is` is null (its weights need the recompute) and, in
        `trainer.mode: separate`, `max_off_policy_threshold` is 0 (stale groups get the recompute and its gap per lag).
        """
        correction = self.algorithm.rollout_correction
        if correction.rollout_is is not None:  # the importance weights need the recomputed proximal log-probs
            return False
        if self.trainer.mode == "separate" and self.trainer.separate.max_off_policy_threshold > 0:
            return False  # stale groups: the recompute gives the rollout/actor gap per lag (`rollout_corr/*`)
        return correction.fuse_on_policy_old_log_prob and not correction.bypass_mode and self.on_policy_update


_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _check(ok: bool, key: str, message: str) -> None:
    if not ok:
        raise ConfigValueError(message, key=key)
