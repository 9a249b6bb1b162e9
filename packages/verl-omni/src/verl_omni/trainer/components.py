"""Build what the trainer drives from the config: pre-flight checks (no Ray), then Ray workers and services.

`preflight` runs in seconds and fails before any worker starts: the model folder (a `tiny://` path is built once
and cached), the prompt files, the trackers, the reward model folder. `build_components` then starts or joins Ray,
places one bundle per actor rank, and starts the actor ranks, the rollout servers (colocated, or on a pool of their
own with `trainer.mode: separate`), the reward model servers (`reward.reward_model.enable`) and the reward scorer.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import pathlib
from collections.abc import Callable
from typing import Any

from verl_core.ray_tensors import register_tensor_transport
from verl_omni.data import PromptDataset, PromptSampler
from verl_omni.trainer.actor_group import ActorGroup
from verl_omni.trainer.checkpoint import CheckpointManager, run_signature
from verl_omni.trainer.config import DiffusionTrainerConfig
from verl_omni.trainer.interfaces import ActorRanks, MetricsTracker, PromptSource, RewardScorer, RolloutService
from verl_omni.trainer.placement import COLOCATED_SHARE, ResourcePool, init_ray
from verl_omni.trainer.tracking import Tracking, check_loggers
from verl_omni.trainer.worker_proxy import check_worker
from verl_omni.trainer.workers import ActorWorker

__all__ = [
    "TINY_SCHEME",
    "ModelPathError",
    "Prepared",
    "TrainerComponents",
    "build_components",
    "preflight",
    "resolve_model_path",
    "served_rollout_config",
]

logger = logging.getLogger(__name__)

TINY_SCHEME = "tiny://"
"""`actor_rollout_ref.model.path: tiny://<model>[/<preset>]` builds a random pipeline (`build_tiny_pipeline`) once."""


def _cache_root() -> pathlib.Path:
    base = os.environ.get("VERL_OMNI_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "verl_omni"
    )
    return pathlib.Path(base)


def served_rollout_config(actor_rollout_ref: Any, device: str) -> Any:
    """The rollout servers' config: `actor_rollout_ref.rollout` serving `actor_rollout_ref.model.path` on `device`.

    With a LoRA actor (`actor_rollout_ref.model.lora_rank > 0`) and `rollout.lora.rank: 0` (the default), the servers
    hold adapters up to the actor's rank: the vLLM family sizes its LoRA slots from `rollout.lora.rank` and refuses
    adapters with none (the diffusers backend takes any rank). A `rollout.lora.rank` set by hand is kept.
    """
    config = actor_rollout_ref.rollout.with_model(actor_rollout_ref.model.path).evolve(device=device)
    if actor_rollout_ref.model.lora_rank > 0 and config.lora.rank == 0:
        config = dataclasses.replace(
            config, lora=dataclasses.replace(config.lora, rank=actor_rollout_ref.model.lora_rank)
        )
    return config


class ModelPathError(FileNotFoundError):
    """`actor_rollout_ref.model.path` names no diffusers pipeline folder (`verl-omni-train` adds the config in use)."""


def resolve_model_path(path: str) -> pathlib.Path:
    """The pipeline folder of `actor_rollout_ref.model.path`; a `tiny://model[/preset]` path is built once, cached.

    Raises:
        ModelPathError: the folder does not exist or has no `model_index.json` (names the key and the path).
        ValueError: an unknown tiny model or preset.
    """
    if path.startswith(TINY_SCHEME):
        model, _, preset = path[len(TINY_SCHEME) :].partition("/")
        preset = preset or "tiny"
        folder = _cache_root() / "tiny" / f"{model}-{preset}-seed0"
        if not (folder / "model_index.json").is_file():
            from verl_omni.testing import build_tiny_pipeline

            try:
                tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
                build_tiny_pipeline(model, tmp, preset=preset, seed=0)
            except ValueError as e:
                raise ValueError(f"actor_rollout_ref.model.path={path!r}: {e}") from e
            folder.parent.mkdir(parents=True, exist_ok=True)
            if not folder.exists():
                os.replace(tmp, folder)
            logger.info("built the random pipeline %s in %s", path, folder)
        return folder
    folder = pathlib.Path(path).expanduser()
    if not (folder / "model_index.json").is_file():
        what = "does not exist" if not folder.exists() else "has no model_index.json (not a diffusers pipeline folder)"
        raise ModelPathError(f"actor_rollout_ref.model.path: {folder} {what}; point it at a diffusers pipeline folder")
    return folder


@dataclasses.dataclass
class Prepared:
    """What `preflight` checked and loaded: the config with the model folder resolved, and the prompt sets."""

    config: DiffusionTrainerConfig
    train_set: Any
    val_set: Any


def preflight(config: DiffusionTrainerConfig) -> Prepared:
    """Check everything that can be checked without Ray; build a `tiny://` pipeline if asked.

    Raises:
        FileNotFoundError: a missing model folder or prompt file (names the key and the path).
        ImportError: a tracker's package is missing (names the extra).
        ValueError: an empty training set, or `rollout.name=vllm_omni` with a model it has no pipeline for.
        CheckpointConflictError: `trainer.default_local_dir` holds checkpoints this run must not resume from or write
            beside (`CheckpointManager.check_resume`).
    """
    from verl_omni.reward import build_scorer

    check_loggers(config.trainer.logger)
    train_set = PromptDataset.from_config(config.data, "train")
    sampler = PromptSampler(train_set, config.data.train_batch_size)  # checks the batch fits the set (names the key)
    val_set = PromptDataset.from_config(config.data, "val") if config.data.val_files else []
    # the reward function(s) load here, in the driver, so a bad path or signature fails before any worker starts
    build_scorer(config.reward).check_data_sources({r.data_source for r in [*train_set, *val_set]})
    _check_reward_model(config)
    folder = resolve_model_path(config.actor_rollout_ref.model.path)
    actor_rollout_ref = config.actor_rollout_ref
    config = config.evolve(
        actor_rollout_ref=actor_rollout_ref.evolve(model=actor_rollout_ref.model.evolve(path=str(folder)))
    )
    _check_rollout_serves_model(config, folder)
    # the checkpoint folder: resume from a checkpoint of this run's settings, never write beside another run's
    trainer = config.trainer
    manager = CheckpointManager(trainer.default_local_dir)
    total_steps = trainer.total_training_steps or trainer.total_epochs * sampler.steps_per_epoch
    manager.check_resume(manager.resolve_resume(trainer.resume_mode, trainer.resume_from_path), run_signature(config),
                         total_steps)  # fmt: skip
    return Prepared(config, train_set, val_set)


def _check_rollout_serves_model(config: DiffusionTrainerConfig, folder: Any) -> None:
    """`rollout.name=vllm_omni` with a model or folder the vLLM-Omni backend does not serve: refused now."""
    rollout = config.actor_rollout_ref.rollout
    if rollout.name != "vllm_omni":
        return
    from verl_omni.models import adapter_for_folder
    from verl_omni.rollout.vllm_omni.served import check_served_model

    adapter = adapter_for_folder(folder, getattr(rollout, "external_lib", None))
    check_served_model(adapter.name, type(adapter).__name__, str(folder))


@dataclasses.dataclass
class TrainerComponents:
    """Everything `FlowGRPOTrainer` drives (see `verl_omni.trainer.interfaces`)."""

    actor: ActorRanks
    rollout: RolloutService
    reward: RewardScorer
    prompts: PromptSource
    val_records: list[Any]
    tracker: MetricsTracker
    checkpoints: CheckpointManager
    total_steps: int
    device: str
    release: Callable[[], None] = lambda: None
    reward_model: Any = None  # a `RewardModelService` with `reward.reward_model.enable`
    relaunch_rollout: Callable[[], Any] | None = None  # the rollout servers shut down and launched again


def build_components(prepared: Prepared, *, write: Callable[[str], None] = print) -> TrainerComponents:
    """Start (or join) Ray and build the actor ranks, rollout servers, reward scorer, sampler and trackers.

    Raises:
        TimeoutError: the bundles cannot be placed in time.
        WorkerInterfaceError: `ActorWorker` does not implement `ActorWorkerAPI` (before Ray starts; names the method).
        WorkerError / RolloutServiceError: a worker fails to start (names it).
    """
    import ray

    check_worker(ActorGroup.role, ActorGroup.protocol, ActorWorker)  # a mismatch fails here, before any rank starts

    from verl_omni.reward import build_reward_manager
    from verl_omni.trainer.colocated_rollout import ColocatedRollout

    config = prepared.config
    trainer, actor_rollout_ref, data = config.trainer, config.actor_rollout_ref, config.data
    seed = 1 if data.seed is None else data.seed  # PromptSampler's default seed
    sampler = PromptSampler(prepared.train_set, data.train_batch_size, shuffle=data.shuffle, seed=seed)
    total_steps = trainer.total_training_steps or trainer.total_epochs * sampler.steps_per_epoch
    actor_cfg = actor_rollout_ref.actor
    if actor_cfg.optim.total_training_steps == -1:
        actor_cfg = actor_cfg.evolve(optim=actor_cfg.optim.evolve(total_training_steps=total_steps))

    reward_cpus = config.reward.num_workers * config.reward.num_cpus_per_worker if config.reward.pool == "ray" else 0
    # separate: the rollout servers on a pool of their own, one bundle each (unless they share the actor's bundles)
    separate = trainer.mode == "separate" and not trainer.separate.share_devices
    if separate:
        reward_cpus += actor_rollout_ref.rollout.nnodes * actor_rollout_ref.rollout.n_gpus_per_node
    rm = config.reward.reward_model
    if rm.enable and not rm.colocated:  # one CPU per server of the reward model's own pool
        reward_cpus += rm.nnodes * rm.n_gpus_per_node // rm.rollout.tensor_model_parallel_size
    started = init_ray(config, extra_cpus=math.ceil(reward_cpus) + 1)
    register_tensor_transport()  # batches reach the actor ranks as raw bytes, not torch's pickle
    pool = rollout_pool = None
    actor = rollout = reward_model = None
    # a colocated reward model shares each actor bundle with the actor rank and the rollout server: a third each
    share = 1 / 3 if rm.colocated else COLOCATED_SHARE
    try:
        use_gpu = _use_gpu(config, ray.cluster_resources())
        device = "cuda" if use_gpu else "cpu"
        pool = ResourcePool(config, use_gpu, fail_fast=started)
        slots = pool.create()
        need_ref = actor_cfg.use_kl_loss and not actor_rollout_ref.model.use_lora
        remote = ray.remote(ActorWorker)
        handles = [
            remote.options(**pool.options(slot, share=share)).remote(
                actor_rollout_ref.model,
                actor_cfg,
                actor_rollout_ref.ref if need_ref else None,
                rank=rank,
                world_size=len(slots),
                device=device,
                threads=trainer.cpu_threads_per_worker,
                nccl_timeout=actor_rollout_ref.nccl_timeout,
            )
            for rank, slot in enumerate(slots)
        ]
        actor = ActorGroup(ActorWorker, handles, [{} for _ in handles], trainer.worker_timeout_s)
        start_s = float(trainer.ray_wait_register_center_timeout)
        start = actor.within(start_s, "trainer.ray_wait_register_center_timeout")
        actor.nodes = start.nodes = start.node_info(list(trainer.ray_master_port_range))
        master = actor.nodes[0]
        info = start.init_engine(master["ip"], master["port"])
        logger.info("actor ranks: %d on %s; %s", len(handles), device, info[0])
        server_config = served_rollout_config(actor_rollout_ref, device)
        rollout_slots, rollout_share = slots, share
        if separate:
            rollout_pool = ResourcePool(config, use_gpu, prefix="actor_rollout_ref.rollout", fail_fast=started)
            rollout_slots, rollout_share = rollout_pool.create(), 1.0

        def launch_rollout() -> ColocatedRollout:
            return ColocatedRollout(
                server_config, rollout_slots, use_gpu=use_gpu, threads=trainer.cpu_threads_per_worker,
                share=rollout_share,
            )  # fmt: skip

        rollout = launch_rollout()
        if rm.enable:
            from verl_omni.trainer.reward_model import RewardModelService

            reward_model = RewardModelService(
                rm, device=device, slots=slots, share=share, threads=trainer.cpu_threads_per_worker
            )
            if config.reward.stream and rm.colocated:
                logger.warning(
                    "reward.stream=true with a colocated reward model (reward.reward_model.enable_resource_pool=false):"
                    " the reward model then shares the rollout's %s while the step generates, which can slow the"
                    " generation by more than streaming hides (on one H200 it made the step slower, see"
                    " docs/omni/rewards.md); streaming pays off with reward.reward_model.enable_resource_pool=true or a"
                    " reward that does not use those devices (e.g. an HTTP scorer elsewhere)",
                    "GPUs" if device == "cuda" else "CPU cores",
                )
        endpoint = reward_model.endpoint if reward_model is not None else None
        reward = build_reward_manager(config.reward, reward_model=endpoint)
        tracker = Tracking(
            trainer.logger,
            pathlib.Path(trainer.run_dir),
            project=trainer.project_name,
            experiment=trainer.experiment_name,
            config=config.to_dict(),
            write=write,
        )
    except BaseException:
        for part in (reward_model, rollout, actor):
            if part is not None:
                part.shutdown()
        for each in (rollout_pool, pool):
            if each is not None:
                each.remove()
        if started:
            ray.shutdown()
        raise

    def relaunch_rollout() -> ColocatedRollout:
        """Shut the rollout servers down and launch them again on the same bundles (base weights)."""
        nonlocal rollout
        if rollout is not None:  # always set once the components exist
            rollout.shutdown()
        rollout = launch_rollout()
        return rollout

    def release() -> None:
        if reward_model is not None:
            reward_model.shutdown()
        rollout.shutdown()
        actor.shutdown()
        pool.remove()
        if rollout_pool is not None:
            rollout_pool.remove()
        if started:
            ray.shutdown()

    return TrainerComponents(
        actor=actor,
        rollout=rollout,
        reward=reward,
        prompts=sampler,
        val_records=list(prepared.val_set),
        tracker=tracker,
        checkpoints=CheckpointManager(trainer.default_local_dir, trainer.max_actor_ckpt_to_keep),
        total_steps=total_steps,
        device=device,
        release=release,
        reward_model=reward_model,
        relaunch_rollout=relaunch_rollout,
    )


def _check_reward_model(root: DiffusionTrainerConfig) -> None:
    """A reward model runs on one node; a local `reward.reward_model.model_path` must exist (hub ids: the backend's).

    Raises:
        ValueError: a reward model with `trainer.nnodes > 1` or an own pool of `reward.reward_model.nnodes > 1` (its
            servers and router bind 127.0.0.1).
        FileNotFoundError: names the key and the path.
    """
    config = root.reward.reward_model
    if not config.enable:
        return
    nodes = root.trainer.nnodes if config.colocated else config.nnodes
    if nodes > 1:
        key = "trainer.nnodes" if config.colocated else "reward.reward_model.nnodes"
        raise ValueError(
            f"{key}={nodes} with reward.reward_model.enable=true: the reward model runs on one node (its servers and "
            "router bind 127.0.0.1); use one node, or score with a reward service of your own (builtin: http)"
        )
    path = str(config.model_path)
    local = path.startswith(("/", ".", "~")) or os.path.exists(os.path.expanduser(path))
    if local and not os.path.isdir(os.path.expanduser(path)):
        raise FileNotFoundError(
            f"reward.reward_model.model_path: {path} is not a folder; point it at a vision-language model folder"
        )


def _use_gpu(config: DiffusionTrainerConfig, resources: dict[str, float]) -> bool:
    device = config.trainer.device
    if device == "cpu":
        return False
    need, what = config.trainer.world_size, "trainer.nnodes x trainer.n_gpus_per_node"
    rollout = config.actor_rollout_ref.rollout
    if config.trainer.mode == "separate":  # the rollout's own pool holds GPUs of its own (none with share_devices)
        need += rollout.nnodes * rollout.n_gpus_per_node
        what += " + actor_rollout_ref.rollout.nnodes x n_gpus_per_node"
    enough = resources.get("GPU", 0) >= need
    if device == "cuda" and not enough:
        raise ValueError(
            f"trainer.device=cuda: the Ray cluster has {resources.get('GPU', 0):g} GPUs, the run needs {what} = {need}"
        )
    return enough
