"""`trainer.*` and `ray_kwargs.*`: the run (steps, logging, checkpoints, resources, timeouts) and the Ray cluster."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from verl_core.config import BaseConfig

__all__ = ["LOGGERS", "RayInitConfig", "RayKwargsConfig", "SeparateRolloutConfig", "TrainerConfig"]

LOGGERS = ("console", "tensorboard", "wandb")


@dataclasses.dataclass
class SeparateRolloutConfig(BaseConfig):
    """`trainer.separate.*`: the staleness knobs of `trainer.mode: separate` (docs/omni/async.md).

    Upstream verl-omni's v1 trainer names the first two `trainer.v1.separate_async.parameter_sync_step` and
    `trainer.v1.sampler.max_off_policy_threshold`; the others have no upstream key.

    Args:
        parameter_sync_step (`int`, *optional*, defaults to `1`): push the actor's weights to the rollout servers
            after every this many training steps.
        max_off_policy_threshold (`int`, *optional*, defaults to `1`): the largest version lag a trained group may
            have (the actor's weight version minus the version that generated it); older groups are dropped and
            counted. 0 is on-policy: the rollout waits for each push, the run equals `trainer.mode: colocated`.
            Must be >= `parameter_sync_step - 1` (otherwise every group goes stale between two pushes).
        queue_size (`int`, *optional*, defaults to `0`): most finished groups waiting in the queue; 0 is
            `data.train_batch_size x (max_off_policy_threshold + 1)`.
        queue_timeout_s (`float`, *optional*, defaults to `600.0`): longest the actor waits for one group; then the
            step fails naming the rollout servers.
        on_rollout_failure (`str`, *optional*, defaults to `"fail"`): what a dead rollout server (met by the
            generation or by the weight push) does to the run. `fail`: the run exits non-zero naming the server.
            `restart`: the rollout servers are relaunched on the same bundles, the actor's current weights pushed to
            them (and checked), a batch lost in flight regenerated; `async/rollout_restarts` counts them.
        max_restarts (`int`, *optional*, defaults to `1`): most rollout relaunches per run with
            `on_rollout_failure: restart`; one more death fails the run as with `fail`, naming the server.
        share_devices (`bool`, *optional*, defaults to `False`): place the rollout servers on the actor's bundles
            (one per actor rank, half of its CPU and GPU each, as colocated mode) instead of a pool of their own;
            `actor_rollout_ref.rollout.nnodes` must then be 0. For one device, where the pools cannot be apart:
            the separate loop's overheads (queue, version gate) measured against colocated.

    Raises:
        ConfigValueError: a value out of range, or a threshold below `parameter_sync_step - 1`.
    """

    parameter_sync_step: int = 1
    max_off_policy_threshold: int = 1
    queue_size: int = 0
    queue_timeout_s: float = 600.0
    on_rollout_failure: Literal["fail", "restart"] = "fail"
    max_restarts: int = 1
    share_devices: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("parameter_sync_step", self.parameter_sync_step >= 1, "an int >= 1")
        self._require("max_off_policy_threshold", self.max_off_policy_threshold >= 0, "an int >= 0 (0: on-policy)")
        self._require(
            "max_off_policy_threshold",
            self.max_off_policy_threshold >= self.parameter_sync_step - 1,
            f">= parameter_sync_step - 1 = {self.parameter_sync_step - 1} (the weights stay "
            f"{self.parameter_sync_step - 1} versions behind between two pushes, so every group would be dropped); "
            "raise max_off_policy_threshold or lower parameter_sync_step",
        )
        self._require("queue_size", self.queue_size >= 0, "an int >= 0 (0: auto)")
        self._require("queue_timeout_s", self.queue_timeout_s > 0, "seconds > 0")
        self._require("max_restarts", self.max_restarts >= 0, "an int >= 0")


@dataclasses.dataclass
class TrainerConfig(BaseConfig):
    """`trainer.*`: how long to train, where to log and checkpoint, on how many nodes and devices.

    Args:
        total_epochs (`int`, *optional*, defaults to `30`): passes over the training prompts.
        total_training_steps (`int`, *optional*): stop after this many steps (overrides `total_epochs`).
        project_name (`str`, *optional*, defaults to `"verl_examples"`): tracker project.
        experiment_name (`str`, *optional*, defaults to `"flow_grpo"`): tracker run name.
        logger (`list[str]`, *optional*, defaults to `["console"]`): any of `console`, `tensorboard`, `wandb`
            (wandb runs offline unless `WANDB_MODE` says otherwise). `metrics.jsonl` is always written.
        log_val_generations (`int`, *optional*, defaults to `0`): validation images logged to the trackers each
            validation (as one grid); 0 logs none.
        nnodes (`int`, *optional*, defaults to `1`): nodes of the Ray cluster the actor ranks are spread over.
        n_gpus_per_node (`int`, *optional*, defaults to `8`): actor ranks per node (GPUs on a GPU cluster, processes
            on a CPU one); the world size is `nnodes * n_gpus_per_node`.
        device (`str`, *optional*, defaults to `"auto"`): `cuda`, `cpu` or `auto` (cuda when the Ray cluster has GPUs).
        save_freq (`int`, *optional*, defaults to `-1`): checkpoint every this many steps and at the last step;
            -1 never.
        test_freq (`int`, *optional*, defaults to `-1`): validate every this many steps and after the last one; -1
            never (except `val_before_train`).
        val_before_train (`bool`, *optional*, defaults to `True`): validate before the first step.
        val_only (`bool`, *optional*, defaults to `False`): validate once and stop.
        resume_mode (`str`, *optional*, defaults to `"auto"`): `auto` (latest checkpoint under `default_local_dir`, if
            any), `disable` (start fresh) or `resume_path` (the checkpoint `resume_from_path`).
        resume_from_path (`str`, *optional*): a `global_step_N` folder; required by `resume_mode: resume_path`.
        default_local_dir (`str`, *optional*): checkpoint root; `global_step_N/` folders go under it.
        max_actor_ckpt_to_keep (`int`, *optional*): keep only the newest this many checkpoints (null keeps all).
        run_dir (`str`, *optional*, defaults to `"outputs/verl_examples/flow_grpo"`): `metrics.jsonl`, TensorBoard
            events, `reward_curve.png`, the sample grid and a failed run's `error.log` go here.
        ray_wait_register_center_timeout (`int`, *optional*, defaults to `300`): seconds the actor workers and the
            rollout servers may take to be placed and start.
        ray_master_port_range (`list[int]`, *optional*, defaults to `[20000, 30000]`): the torch.distributed master
            port of the actor ranks is picked in this range.
        worker_timeout_s (`float`, *optional*, defaults to `1800.0`): longest one call to the actor workers (log-probs,
            update, weight sync, checkpoint) may take; a dead or hung worker is an error after at most this long.
        cpu_threads_per_worker (`int`, *optional*): torch threads of each actor worker and rollout server on the CPU;
            null keeps Ray's setting (one thread per CPU the actor holds).
        check_served_weights (`bool`, *optional*, defaults to `True`): once per run, after the first weight sync,
            read every pushed tensor back from every rollout server and require it equal to the actor's (a sync
            that loads nothing is an error naming the server, instead of a run against a frozen sampler). It moves
            the pushed state to the driver once: the adapter with LoRA, the whole model without; turn it off for
            full fine-tuning of a large model. Backends that cannot read back LoRA tensors (vLLM-Omni) skip it.
        peak_tflops (`float`, *optional*, defaults to `790.0`): dense bf16 peak of one device in TFLOP/s, the
            denominator of the per-stage MFU the trainer logs (`perf/mfu/<stage>`, `verl_omni.trainer.flops`) on
            CUDA; 790 is what a plain 8k x 8k bf16 GEMM reaches on an H200 (set your GPU's; null logs FLOPs only).
            Not used on the CPU.
        mode (`str`, *optional*, defaults to `"colocated"`): `colocated`: the rollout servers share the actor's
            devices and sleep while it trains, one step at a time. `separate`: the servers run on their own pool
            (`actor_rollout_ref.rollout.nnodes` x `n_gpus_per_node`), never sleep, and generate ahead into a
            bounded queue; the staleness knobs are `trainer.separate.*` (docs/omni/async.md).
        separate (`SeparateRolloutConfig`): weight push interval, staleness bound, queue size and timeout of
            `mode: separate`.
        use_v1 (`bool`, *optional*, defaults to `False`): only false (verl-omni's TransferQueue trainer is not
            implemented).

    Raises:
        ConfigValueError: a value out of range, an unknown logger, or `resume_mode: resume_path` without
            `resume_from_path`.
    """

    total_epochs: int = 30
    total_training_steps: int | None = None
    project_name: str = "verl_examples"
    experiment_name: str = "flow_grpo"
    logger: list[str] = dataclasses.field(default_factory=lambda: ["console"])
    log_val_generations: int = 0
    nnodes: int = 1
    n_gpus_per_node: int = 8
    device: Literal["auto", "cuda", "cpu"] = "auto"
    save_freq: int = -1
    test_freq: int = -1
    val_before_train: bool = True
    val_only: bool = False
    resume_mode: Literal["auto", "disable", "resume_path"] = "auto"
    resume_from_path: str | None = None
    default_local_dir: str = "checkpoints/verl_examples/flow_grpo"
    max_actor_ckpt_to_keep: int | None = None
    run_dir: str = "outputs/verl_examples/flow_grpo"
    ray_wait_register_center_timeout: int = 300
    ray_master_port_range: list[int] = dataclasses.field(default_factory=lambda: [20000, 30000])
    worker_timeout_s: float = 1800.0
    cpu_threads_per_worker: int | None = None
    check_served_weights: bool = True
    peak_tflops: float | None = 790.0
    mode: Literal["colocated", "separate"] = "colocated"
    separate: SeparateRolloutConfig = dataclasses.field(default_factory=SeparateRolloutConfig)
    use_v1: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require("total_epochs", self.total_epochs >= 1, "an int >= 1")
        self._require(
            "total_training_steps", self.total_training_steps is None or self.total_training_steps >= 1, "null or >= 1"
        )
        unknown = [name for name in self.logger if name not in LOGGERS]
        self._require("logger", not unknown, f"a list of {', '.join(LOGGERS)} (unknown: {unknown})")
        self._require("log_val_generations", self.log_val_generations >= 0, "an int >= 0")
        self._require("nnodes", self.nnodes >= 1, "an int >= 1")
        self._require("n_gpus_per_node", self.n_gpus_per_node >= 1, "an int >= 1")
        for key in ("save_freq", "test_freq"):
            value = getattr(self, key)
            self._require(key, value == -1 or value >= 1, "-1 (never) or an int >= 1")
        self._require(
            "resume_from_path",
            self.resume_mode != "resume_path" or bool(self.resume_from_path),
            "a checkpoint folder (global_step_N) when resume_mode is 'resume_path'",
        )
        self._require(
            "max_actor_ckpt_to_keep",
            self.max_actor_ckpt_to_keep is None or self.max_actor_ckpt_to_keep >= 1,
            "null (keep all) or an int >= 1",
        )
        self._require("ray_wait_register_center_timeout", self.ray_wait_register_center_timeout > 0, "seconds > 0")
        low_high = self.ray_master_port_range
        self._require(
            "ray_master_port_range",
            len(low_high) == 2 and 1024 <= low_high[0] < low_high[1] <= 65535,
            "[low, high] with 1024 <= low < high <= 65535",
        )
        self._require("worker_timeout_s", self.worker_timeout_s > 0, "seconds > 0")
        self._require(
            "peak_tflops", self.peak_tflops is None or self.peak_tflops > 0, "TFLOP/s > 0, or null (no MFU logged)"
        )
        self._require(
            "cpu_threads_per_worker", self.cpu_threads_per_worker is None or self.cpu_threads_per_worker >= 1, ">= 1"
        )
        self._require("use_v1", not self.use_v1, "false (verl-omni's v1 TransferQueue trainer is not implemented here)")

    @property
    def world_size(self) -> int:
        """Actor ranks over the whole cluster: `nnodes * n_gpus_per_node`."""
        return self.nnodes * self.n_gpus_per_node


@dataclasses.dataclass
class RayInitConfig(BaseConfig):
    """`ray_kwargs.ray_init.*`: arguments of `ray.init` (when the trainer starts or joins Ray itself).

    Args:
        address (`str`, *optional*): the cluster to join: `"auto"` (the one `ray start --head` started on this
            machine), `"ray://host:10001"` or `"host:6379"`; null starts a local Ray (or uses `RAY_ADDRESS`).
        num_cpus (`int`, *optional*): CPUs of a local Ray; null = all of this machine's.
        num_gpus (`int`, *optional*): GPUs of a local Ray; null = all visible ones.
        namespace (`str`, *optional*): Ray namespace of the run's named actors.
        include_dashboard (`bool`, *optional*, defaults to `False`): start Ray's dashboard with a local Ray.
        runtime_env (`dict`, *optional*): Ray runtime environment (e.g. `env_vars`) for every worker.
    """

    address: str | None = None
    num_cpus: int | None = None
    num_gpus: int | None = None
    namespace: str | None = None
    include_dashboard: bool = False
    runtime_env: dict[str, Any] | None = None


@dataclasses.dataclass
class RayKwargsConfig(BaseConfig):
    """`ray_kwargs.*`: how the trainer reaches Ray.

    Args:
        ray_init (`RayInitConfig`): arguments of `ray.init`.
        timeline_json_file (`str`, *optional*): must be null (Ray timeline dumps are not implemented).
    """

    ray_init: RayInitConfig = dataclasses.field(default_factory=RayInitConfig)
    timeline_json_file: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._require(
            "timeline_json_file", self.timeline_json_file is None, "null (timeline dumps are not implemented)"
        )
