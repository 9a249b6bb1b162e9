"""`FlowGRPOTrainer`: the FlowGRPO recipe, read top to bottom — `__init__` → `setup` → `train` → `cleanup`.

One step (numbered as in `train`): prompts → rollout of `n` images per prompt with a pinned SDE window (the
agent loop's requests to the `RolloutReplica`'s HTTP servers) → the rollout sleeps → reward → group advantages →
old log-probs (recomputed; fused into an on-policy update; or the rollout's in bypass mode) → reference transition
means (with the KL term) → policy update → the rollout wakes and actor rank 0 streams the new weights to every
server (`update_weights`, in memory) → validation every `trainer.test_freq` → checkpoint every
`trainer.save_freq` → metrics. The components it drives are `Protocol`s (`verl_omni.trainer.interfaces`), built by
`verl_omni.trainer.components.build_components` unless handed in.
"""

from __future__ import annotations

import contextlib
import logging
import pathlib
import time
from collections.abc import Iterator

import torch
from tensordict import TensorDict

from verl_core.rollout.errors import WeightSyncError  # re-exported: the trainer's served-weights check raises it
from verl_omni.algos import compute_flow_grpo_advantages, loss_spec, old_policy_decay
from verl_omni.config.actor import torch_dtype_name
from verl_omni.data import iter_batches
from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.reward.batch import RewardOutput
from verl_omni.reward.stream import RewardStream
from verl_omni.trainer.checkpoint import run_signature
from verl_omni.trainer.components import TrainerComponents
from verl_omni.trainer.config import DiffusionTrainerConfig
from verl_omni.trainer.flops import StageFlops
from verl_omni.trainer.report import begin_val_images, save_val_images
from verl_omni.trainer.separate_mode import SeparateModeMixin
from verl_omni.trainer.separate_rollout import SeparateRollout
from verl_omni.trainer.staleness import GroupConsumer
from verl_omni.trainer.step_data import STEP_SEED_STRIDE, StepDataMixin

__all__ = ["FlowGRPOTrainer", "WeightSyncError"]

logger = logging.getLogger(__name__)

_VAL_SEED_OFFSET = 7_777_777  # validation noise is the same at every validation, so samples are comparable


class FlowGRPOTrainer(StepDataMixin, SeparateModeMixin):
    """FlowGRPO on a diffusers pipeline: Ray actor ranks (FSDP2), colocated rollout servers, a reward scorer.

    Features and their flags:

    * Group size and batch: `actor_rollout_ref.rollout.n` images per prompt, `data.train_batch_size` prompts.
    * SDE window: `rollout.algo.sde_window_size` K trained steps, the window start placed per step inside
      `rollout.algo.sde_window_range` by `rollout.algo.sample_strategy` (`random`: drawn from
      `sde_window_seed` and the step; `progressive`: MixGRPO's window sliding by K every `iters_per_group` steps)
      and pinned for every request of the step; the last start is checkpointed and checked on resume.
    * Colocated rollout: the servers sleep while the actor trains and wake for the weight sync
      (`rollout.free_cache_engine`; false keeps them awake).
    * Separate rollout (`trainer.mode: separate`): the servers on a pool of their own generate ahead into a bounded
      queue of versioned groups (`SeparateRollout`); steps 1-3 take a step's groups from it, dropping those more than
      `trainer.separate.max_off_policy_threshold` versions old (`GroupConsumer`); the weights are pushed every
      `trainer.separate.parameter_sync_step` steps, between two requests; `rollout_is: token` weights stale groups.
    * Reward model: `reward.reward_model.enable` serves a vision-language model on verl-core rollout servers that
      reward functions query (`reward_router_address`); colocated servers wake for each reward phase and sleep
      after it (`reward.reward_model.rollout.free_cache_engine`); a server that dies stops the run, naming it.
    * Old log-probs: recomputed by the actor; or, when the update is on-policy (`actor.ppo_epochs` 1, one
      mini-batch per step), taken by the update from its own forwards with no separate pass
      (`algorithm.rollout_correction.fuse_on_policy_old_log_prob`, on by default); or the rollout's with
      `algorithm.rollout_correction.bypass_mode`.
    * KL to the reference: `actor.use_kl_loss` (LoRA: adapters disabled; full fine-tuning: a frozen engine).
    * Preference pairs (`model.algorithm: dpo`): the update trains only each group's best and worst sample, as
      adjacent rows sharing one noise draw and noise level per pair (seeded by the run seed and the step).
    * Validation: every `trainer.test_freq` steps, before training (`trainer.val_before_train`), or only
      (`trainer.val_only`), with `rollout.val_kwargs` (ODE sampling by default).
    * Checkpoints: every `trainer.save_freq` steps, atomic; resume with `trainer.resume_mode`.
    * Weight sync check: every server must answer the pushed version; after the run's first sync every server's
      served tensors must equal the actor's, bit for bit (`trainer.check_served_weights`, on by default).

    Args:
        config (`DiffusionTrainerConfig`): the validated config (model path resolved by `preflight`).

    Raises:
        ValueError: `trainer.test_freq` or `val_before_train` ask for validation without `data.val_files`.
    """

    def __init__(self, config: DiffusionTrainerConfig) -> None:
        self.config = config
        rollout = config.actor_rollout_ref.rollout
        model = _adapter_name(config.actor_rollout_ref.model.path)
        self.loss = loss_spec(config.actor_rollout_ref.actor.diffusion_loss.loss_mode)
        self.loss_mode = config.actor_rollout_ref.actor.diffusion_loss.loss_mode  # the progress bar's label
        self.train_sampling = rollout.sampling_config(model)
        if not self.loss.needs_log_probs:  # a loss on clean samples: ODE sampling, only the clean latents come back
            self.train_sampling = self.train_sampling.evolve(calculate_log_probs=False)
        self.val_sampling = rollout.val_sampling_config(model)
        self.window = self.train_sampling.sde_window_size if self.loss.needs_log_probs else 0
        self.steps_trained = self.window or self.train_sampling.num_inference_steps - 1
        self.seed = rollout.seed or 0
        self.bypass = config.algorithm.rollout_correction.bypass_mode
        self.fuse_old_log_prob = config.fuse_old_log_prob
        source = "recomputed before the update"
        if not self.loss.needs_log_probs:
            source = "none (the loss trains on clean samples)"
        elif self.bypass:
            source = "the rollout's (bypass mode)"
        elif self.fuse_old_log_prob:
            source = "taken by the on-policy update from its own forwards (fused)"
        logger.info("old log-probs: %s", source)
        self.use_kl = config.actor_rollout_ref.actor.use_kl_loss
        self.free_cache = rollout.free_cache_engine
        self.step = 0
        self.window_start: int | None = None  # the SDE window start of `self.step` (None: no window, or no step yet)
        self.weight_version = 0
        self._served_weights_checked = False  # `trainer.check_served_weights`: once per run, after the first sync
        self.separate: SeparateRollout | None = None  # `trainer.mode: separate`: the producer (built by `setup`)
        self.consumer: GroupConsumer | None = None
        self.history: list[dict[str, float]] = []
        self.val_images: dict[int, torch.Tensor] = {}
        self.components: TrainerComponents | None = None
        self._progress = None
        self._flops: StageFlops | None = None

    # ---- setup --------------------------------------------------------------------------------------------

    def setup(self, components: TrainerComponents) -> None:
        """Take the components, resume from a checkpoint if `trainer.resume_mode` finds one.

        Raises:
            FileNotFoundError: `resume_mode: resume_path` names no complete checkpoint.
            CheckpointConflictError: `trainer.default_local_dir` holds checkpoints of another run, or newer ones than
                the one resumed from, or this run starts fresh beside some (`CheckpointManager.check_resume`).
        """
        self.components = components
        trainer = self.config.trainer
        self._flops = StageFlops.for_config(self.config, components.device)  # perf/flops/*, perf/mfu/*
        needs_val = trainer.val_before_train or trainer.val_only or trainer.test_freq > 0
        if needs_val and not components.val_records:
            logger.warning("no validation prompts (data.val_files): validation is skipped")
        path = components.checkpoints.resolve_resume(trainer.resume_mode, trainer.resume_from_path)
        components.checkpoints.check_resume(path, run_signature(self.config), components.total_steps)
        if path is not None:
            state = components.checkpoints.load_trainer_state(path)
            components.actor.load_checkpoint(str(path / "actor"))
            components.prompts.load_state_dict(state["sampler"])
            self.step = int(state["step"])
            self._resume_window(state.get("sde_window_start"))
            logger.info("resumed from %s (step %d)", path, self.step)
            # the servers start from the base weights: give them the resumed policy before the first rollout
            self._sync_weights(self.step)
        if trainer.mode == "separate" and not trainer.val_only:
            self._start_separate()
        components.tracker.begin(self.step)  # metrics.jsonl holds this run's history only
        begin_val_images(pathlib.Path(trainer.run_dir), self.step)  # and val_images/ likewise

    # ---- the loop -----------------------------------------------------------------------------------------

    def train(self) -> list[dict[str, float]]:
        """Run from `self.step` to the last step; return the metrics of every step run."""
        from tqdm.auto import tqdm

        c, trainer = self._components(), self.config.trainer
        if self.step == 0 and (trainer.val_before_train or trainer.val_only):
            val_metrics = self.validate()
            if val_metrics:
                c.tracker.log(val_metrics, 0)
        if trainer.val_only:
            return self.history
        progress = tqdm(total=c.total_steps, initial=self.step, desc=self.loss_mode, unit="step", dynamic_ncols=True)
        self._progress = progress  # closed by `cleanup` when the loop is cut short (Ctrl-C)
        while self.step < c.total_steps:
            step = self.step + 1
            timing: dict[str, float] = {}
            metrics: dict[str, float] = {}
            with _timer(timing, "step"):
                if self.separate is None:
                    # 1. prompts: the next batch from the seeded, resumable sampler
                    records = c.prompts.next_batch()

                    # 2. rollout: n images per prompt, one SDE window for the whole step
                    sampling, start = self._step_sampling(step)
                    self.window_start = start if self.window else None
                    # 3. the rollout sleeps: the actor gets the devices; 4. reward: one scalar per image
                    #    (`reward.stream`: each group scored as soon as it is generated, joined in batch order)
                    batch, scored = self._generate_and_score(records, sampling, step, timing, metrics)
                else:
                    # 1-3. separate: the step's groups from the rollout's queue, none staler than the threshold;
                    #    4. reward
                    records, batch, start = self._take_groups(timing, metrics)
                    batch, scored = self._score(records, batch, step, timing)
                rewards, reward_metrics = scored.scores, scored.metrics()

                # 4b. DanceGRPO: each sample trains a random subset of its stored SDE steps (timestep_fraction < 1)
                if self.config.algorithm.timestep_fraction < 1 and "log_probs" in batch.keys():  # noqa: SIM118
                    batch["train_step_mask"] = self._train_step_mask(batch, step)

                # 5. group advantages (std over the (B, K) advantage matrix, as verl-omni); a loss on clean samples
                #    takes one per sample after `algorithm.adv_mode`, and the timesteps it trains
                with _timer(timing, "adv"):
                    batch["advantages"] = compute_flow_grpo_advantages(
                        rewards,
                        batch["prompt_index"],
                        norm_adv_by_std_in_grpo=self.config.algorithm.norm_adv_by_std_in_grpo,
                        global_std=self.config.algorithm.global_std,
                        std_repeat=self.steps_trained if self.loss.needs_log_probs else 1,
                    )
                    train_batch = batch  # what the update trains on (online DPO: the chosen/rejected pairs only)
                    if self.loss.trains_on == "pairs":
                        train_batch = self._prepare_pair_batch(batch, rewards, step)
                    elif not self.loss.needs_log_probs:
                        self._prepare_clean_batch(batch, step)

                # 6. old log-probs: the rollout's (bypass mode); or none here when the update is on-policy and
                #    fused (it takes them from its own forwards, detached); or recomputed under the current weights;
                #    none for a loss on clean samples
                if not self.loss.needs_log_probs:
                    pass
                elif self.bypass:
                    batch["old_log_probs"] = batch["log_probs"].clone()
                elif not self.fuse_old_log_prob:
                    with _timer(timing, "old_log_prob"):
                        batch.update(torch.cat(c.actor.compute_log_prob(batch)))  # + old means
                    metrics.update(self._peak_memory("old_log_prob"))
                if self.separate is not None and "old_log_probs" in batch.keys():  # noqa: SIM118 - a TensorDict
                    # 6b. separate: the log-prob gap per lag; `rollout_is`: the truncated IS weights of stale groups
                    metrics.update(self._correct_staleness(batch))

                # 7. reference transition means for the KL term
                if self.use_kl:
                    with _timer(timing, "ref"):
                        ref = torch.cat(c.actor.compute_ref(batch))
                    batch["ref_prev_sample_mean"] = ref["ref_prev_sample_mean"]
                    metrics.update(self._peak_memory("ref"))

                # 8. policy update: one optimizer step per mini-batch
                with _timer(timing, "update_actor"):
                    metrics.update(c.actor.update_policy(train_batch)[0])
                metrics.update(self._peak_memory("update_actor"))
                algo = self.config.algorithm
                if "old_velocity" in self.loss.needs and step % algo.old_policy_update_interval == 0:
                    decay = old_policy_decay(step, algo.old_policy_decay_schedule, algo.old_policy_decay)
                    metrics.update(c.actor.refresh_old_policy(decay)[0])  # θ_old ← d·θ_old + (1 − d)·θ

                # 9. weight sync: the rollout wakes, actor rank 0 streams the new weights to every server
                #    (separate: every `parameter_sync_step` steps, between two of the rollout's requests)
                with _timer(timing, "update_weights"):
                    sync = self._sync_weights if self.separate is None else self._separate_sync
                    metrics.update(sync(step))

            # 10. validation
            if trainer.test_freq > 0 and (step % trainer.test_freq == 0 or step == c.total_steps):
                with _timer(timing, "testing"):
                    metrics.update(self.validate(step))

            # 11. checkpoint
            self.step = step
            if trainer.save_freq > 0 and (step % trainer.save_freq == 0 or step == c.total_steps):
                with _timer(timing, "save_checkpoint"):
                    self.save_checkpoint()

            # 12. metrics
            metrics.update(self._step_metrics(batch, rewards, reward_metrics, start, timing, step, train_batch))
            metrics.update(self._separate_metrics(timing))
            self.history.append(metrics)
            c.tracker.log(metrics, step)
            progress.update(1)
            progress.set_postfix(reward=f"{metrics['critic/rewards/mean']:+.4f}")
        progress.close()
        return self.history

    # ---- phases -------------------------------------------------------------------------------------------

    def _generate_and_score(
        self, records: list, sampling: DiffusionSamplingConfig, step: int, timing: dict, metrics: dict
    ) -> tuple[TensorDict, RewardOutput]:
        """Steps 2-4: the rollout, its sleep, the rewards; `timing_s/reward_exposed` is what the step waits for them.

        Without `reward.stream` the reward stage follows generation: `reward` = `reward_exposed`, the sleeping reward
        model's wake-up and sleep included. With it each request's groups are scored while the others are
        generated (`RewardStream`), the reward model awake through both: `reward_exposed` is the reward model's
        wake-up before generation, the wait for the last group and its sleep after it; `reward` is the span from
        the first group submitted to the last scored, plus that wake-up and sleep. `reward_model_wake` /
        `reward_model_sleep` are logged when the reward model sleeps between phases.
        """
        c = self._components()
        seed = self.seed + step * STEP_SEED_STRIDE
        with contextlib.ExitStack() as scope:
            stream = None
            if self.config.reward.stream:
                scope.enter_context(self._reward_model_awake(f"the reward of step {step}", timing))
                stream = scope.enter_context(
                    RewardStream(c.reward, records, n=sampling.n, step=step, timeout_s=self.config.reward.timeout_s,
                                 max_workers=self.config.reward.num_workers)
                )  # fmt: skip
            with _timer(timing, "gen"):
                if stream is None:
                    batch = c.rollout.generate(records, sampling, seed=seed)
                else:
                    batch = c.rollout.generate(records, sampling, seed=seed, on_request_done=stream.submit)
            self._check_served_version(batch)
            metrics.update(getattr(c.rollout, "last_request_metrics", {}))  # transport + codec time
            if self.free_cache:
                with _timer(timing, "rollout_sleep"):
                    c.rollout.sleep()
            if stream is not None:
                with _timer(timing, "reward_exposed"):
                    scored = stream.collect(batch.batch_size[0])
                    scope.close()  # the stream's threads end and the reward model sleeps: the step waits for both
                lifecycle = timing.get("reward_model_wake", 0.0) + timing.get("reward_model_sleep", 0.0)
                timing["reward_exposed"] += timing.get("reward_model_wake", 0.0)
                timing["reward"] = max(stream.span_s + lifecycle, timing["reward_exposed"])
                return batch, scored
        per_sample = [records[int(i)] for i in batch["prompt_index"]]
        with _timer(timing, "reward_exposed"), self._reward_model_awake(f"the reward of step {step}", timing):
            scored = c.reward.score_records(batch["images"], per_sample, step=step)
        timing["reward"] = timing["reward_exposed"]
        return batch, scored

    def _check_served_version(self, batch: TensorDict) -> None:
        """Every trajectory must come from the weights pushed last (a stale server would poison the update)."""
        served = batch["weight_version"]
        stale = served != self.weight_version
        if bool(stale.any()):
            ranks = sorted({int(r) for r in batch["server_rank"][stale]})
            versions = sorted({int(v) for v in served[stale]})
            raise WeightSyncError(
                f"rollout server(s) {ranks} served weight version(s) {versions}; the actor pushed version "
                f"{self.weight_version}"
            )

    def _sync_weights(self, version: int) -> dict[str, float]:
        """Wake the rollout, push the actor's weights as `version`, check every server serves it."""
        c = self._components()
        rollout_cfg = self.config.actor_rollout_ref.rollout
        wake_s = 0.0
        if self.free_cache:
            start = time.perf_counter()
            c.rollout.wake_up()
            wake_s = time.perf_counter() - start
        pushed = c.actor.push_weights(
            c.rollout.weight_targets(),
            version,
            rollout_cfg.update_weights_bucket_bytes,
            rollout_cfg.weight_sync_timeout_s,
            torch_dtype_name(rollout_cfg.dtype),  # the servers compute in it: bf16 halves the bytes of fp32 masters
            rollout_cfg.update_weights_transport,  # "auto": loopback servers take GPU handles or a shm segment
        )[0]
        served = dict(enumerate(pushed["served_versions"]))  # each server's answer to the push
        stale = {rank: v for rank, v in served.items() if v != version}
        if stale:
            raise WeightSyncError(
                f"rollout server(s) {sorted(stale)} serve weight version(s) {sorted(set(stale.values()))} after the "
                f"actor pushed version {version}"
            )
        self.weight_version = version
        if self.config.trainer.check_served_weights and not self._served_weights_checked:
            self._check_served_weights(version)
        return {
            "rollout/weight_version": float(version),
            "perf/weight_sync_bytes": pushed["bytes"],
            "perf/weight_sync_shm_servers": pushed.get("shm_servers", 0.0),
            "perf/weight_sync_cuda_ipc_servers": pushed.get("cuda_ipc_servers", 0.0),
            "timing_s/weight_export": pushed["export_s"],
            "timing_s/weight_send": pushed["send_s"],
            "timing_s/rollout_wake": wake_s,
        }

    def _check_served_weights(self, version: int) -> None:
        """Every server must serve bit for bit what the actor exports now (`verl_omni.trainer.served_check`).

        Raises:
            WeightSyncError: a server serves other tensors (names it, how many differ, and the key that turns the
                check off).
        """
        from verl_omni.trainer.served_check import CHECK_KEY, served_weights_error

        c = self._components()
        start = time.perf_counter()
        dtype = torch_dtype_name(self.config.actor_rollout_ref.rollout.dtype)
        exported = c.actor.exported_weights(dtype)[0]
        expected, kind = exported["tensors"], exported["kind"]
        served = c.rollout.served_weights(list(expected), kind)
        self._served_weights_checked = True
        if served is None:
            logger.warning(
                "served-weights check skipped: the %s rollout backend cannot read back %s tensors (%s=false "
                "silences this)",
                self.config.actor_rollout_ref.rollout.name,
                kind,
                CHECK_KEY,
            )
            return
        error = served_weights_error(expected, served, c.rollout.weight_targets(), version=version, kind=kind)
        if error is not None:
            raise WeightSyncError(error)
        logger.info(
            "served weights checked: the %d %s tensors on %d server(s) equal the actor's (%.2f s; %s=false skips it)",
            len(expected),
            kind,
            len(served),
            time.perf_counter() - start,
            CHECK_KEY,
        )

    def validate(self, step: int | None = None) -> dict[str, float]:
        """Sample the validation prompts with `rollout.val_kwargs`, score them; keep the images for the grid."""
        c = self._components()
        if not c.val_records:
            return {}
        step = self.step if step is None else step
        data = self.config.data
        images, rewards, offset = [], [], 0
        val_seed = self.config.actor_rollout_ref.rollout.val_kwargs.seed
        base = val_seed if val_seed is not None else self.seed + _VAL_SEED_OFFSET
        for chunk in iter_batches(c.val_records, data.val_batch_size):
            seed = base + offset * self.val_sampling.n
            with self.separate.pause() if self.separate is not None else contextlib.nullcontext():
                batch = c.rollout.generate(chunk, self.val_sampling, seed=seed)
            per_sample = [chunk[int(i)] for i in batch["prompt_index"]]
            images.append(batch["images"])
            with self._reward_model_awake(f"the validation reward at step {step}"):
                rewards.append(c.reward.score_records(batch["images"], per_sample, step=step).scores)
            offset += len(chunk)
        grid = torch.cat(images)
        scores = torch.cat(rewards).double()
        self.val_images[step] = grid
        save_val_images(pathlib.Path(self.config.trainer.run_dir), step, grid)  # the grid of a resumed run needs it
        n_log = self.config.trainer.log_val_generations
        if n_log:
            c.tracker.log_images("val/generations", grid[:n_log], step)
        return {
            "val/reward_mean": scores.mean().item(),
            "val/reward_std": scores.std().item() if scores.numel() > 1 else 0.0,
        }

    def save_checkpoint(self) -> None:
        """Save the actor engine and the driver state as `global_step_{step}` (atomically)."""
        c = self._components()
        state = {
            "step": self.step,
            # separate: the sampler runs ahead; resume after the last batch trained (the queue is regenerated)
            "sampler": c.prompts.state_dict() if self.separate is None else self.separate.sampler_state,
            "weight_version": self.weight_version,  # what the servers hold; separate: no group is ever newer
            "sde_window_start": self.window_start,  # MixGRPO's window position at this step (None: no window)
            "run": run_signature(self.config),  # a resume must match these settings (`CheckpointManager.check_resume`)
        }
        c.checkpoints.save(self.step, c.actor.save_checkpoint, state)

    def _peak_memory(self, stage: str) -> dict[str, float]:
        c = self._components()
        if c.device != "cuda":
            return {}
        return {f"perf/max_memory_allocated_gb/{stage}": max(c.actor.peak_memory_gb())}

    # ---- cleanup ------------------------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Close the trackers and the reward scorer, stop every worker (safe to call twice)."""
        if self._progress is not None:
            self._progress.close()  # ends the bar's line: what follows starts on its own
            self._progress = None
        if self.separate is not None:
            self.separate.stop()  # before the servers go: the thread ends after its request in flight
            self.separate = None
        c, self.components = self.components, None
        if c is None:
            return
        for close in (c.tracker.close, c.reward.close, c.release):
            try:
                close()
            except Exception as e:  # cleanup must reach every part
                logger.warning("cleanup: %s", e)

    def _reward_model_awake(self, what: str, timing: dict | None = None) -> contextlib.AbstractContextManager[None]:
        """The reward model's servers awake for `what` (`RewardModelService.awake`); nothing without a reward model.

        With `timing`, the wake-up's and the sleep's seconds are added to it.
        """
        reward_model = self._components().reward_model
        return reward_model.awake(what, timing) if reward_model is not None else contextlib.nullcontext()

    def _components(self) -> TrainerComponents:
        if self.components is None:
            raise RuntimeError("FlowGRPOTrainer: call setup() first")
        return self.components


def _adapter_name(path: str) -> str | None:
    """The model adapter name (`qwen_image`, `sd3`) of a pipeline folder; it decides which CFG key applies."""
    import json
    import pathlib

    from verl_omni.models import get_class

    index = pathlib.Path(path) / "model_index.json"
    if not index.is_file():
        return None
    return get_class(json.loads(index.read_text())["_class_name"]).name


@contextlib.contextmanager
def _timer(timing: dict[str, float], name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        timing[name] = timing.get(name, 0.0) + time.perf_counter() - start
