"""The actor role: `ActorWorkerAPI` (what each rank implements) and `ActorGroup` (the trainer's typed proxy).

The trainer writes `actor.update_policy(batch)`, `actor.push_weights(...)`: each attribute of `ActorGroup` is built
from the Protocol's method, so its parameters and result type come from `ActorWorkerAPI` (a list, one per rank).
`verl_omni.trainer.workers.ActorWorker` implements the Protocol; `ActorGroup(ActorWorker, ...)` checks that it does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from tensordict import TensorDict

from verl_core.best_effort import best_effort
from verl_omni.trainer.worker_proxy import EveryRank, RankGroup, SplitRanks

__all__ = ["ActorGroup", "ActorWorkerAPI"]

logger = logging.getLogger(__name__)


class ActorWorkerAPI(Protocol):
    """One actor rank, as the trainer calls it (implemented by `verl_omni.trainer.workers.ActorWorker`).

    The collectives (`init_engine`, `update_policy`, `push_weights`, `exported_weights`, checkpoints) run on every
    rank at once; `ActorGroup` calls them so.
    """

    def node_info(self, port_range: Sequence[int] = (20000, 30000)) -> dict[str, Any]:
        """This rank's `{"ip", "node_id", "pid", "port"}`; `port` is free in `port_range` (rank 0's: the master)."""
        ...

    def init_engine(self, master_addr: str, master_port: int) -> dict[str, Any]:
        """Join the process group and build the engine(s); a summary (`num_lora_modules`, `device`, ...)."""
        ...

    def compute_log_prob(self, batch: TensorDict) -> TensorDict:
        """Old log-probs of this rank's share, on the CPU."""
        ...

    def compute_ref(self, batch: TensorDict) -> TensorDict:
        """Reference log-probs and transition means of this rank's share, on the CPU."""
        ...

    def update_policy(self, batch: TensorDict) -> dict[str, float]:
        """The policy update on this rank's share; metrics averaged over ranks."""
        ...

    def refresh_old_policy(self, decay: float) -> dict[str, float]:
        """`θ_old ← decay·θ_old + (1 − decay)·θ`."""
        ...

    def push_weights(
        self,
        targets: list[Any],
        version: int,
        bucket_bytes: int,
        timeout_s: float,
        dtype: str | None = None,
        transport: str = "auto",
    ) -> dict[str, Any]:
        """Export the trainable weights (a collective); rank 0 sends them to the servers at `targets`."""
        ...

    def exported_weights(self, dtype: str | None = None) -> dict[str, Any]:
        """`{"kind", "tensors"}`: what a push sends now, as CPU copies (tensors on rank 0 only)."""
        ...

    def close_weight_segment(self) -> None:
        """Unlink the weight-sync segment."""
        ...

    def save_checkpoint(self, path: str) -> None:
        """Save the engine's checkpoint under `path` (a collective)."""
        ...

    def load_checkpoint(self, path: str) -> int:
        """Load the engine's checkpoint from `path` (a collective); its optimizer step."""
        ...

    def state_fingerprint(self) -> dict[str, Any]:
        """Full copies of the trainable parameters and the optimizer state (for tests; a collective)."""
        ...

    def peak_memory_gb(self) -> float:
        """Peak accelerator memory since the last call, in GiB; resets the counter."""
        ...


class ActorGroup(RankGroup):
    """The driver's typed handle on every actor rank (`RankGroup`: rank-order results, a failed rank named).

    Args:
        worker_cls (`type`): the class the ranks run (`ActorWorker`); must implement `ActorWorkerAPI`.
        handles (`list`), nodes (`list[dict]`), timeout_s (`float`): as `RankGroup` (`trainer.worker_timeout_s`).

    Raises:
        WorkerInterfaceError: `worker_cls` lacks a method of `ActorWorkerAPI` or takes other parameters.
    """

    role = "actor"
    protocol = ActorWorkerAPI
    drop_keys = ("images",)  # the decoded images stay on the driver (rewards); the update reads latents

    node_info = EveryRank(ActorWorkerAPI.node_info)
    init_engine = EveryRank(ActorWorkerAPI.init_engine)
    compute_log_prob = SplitRanks(ActorWorkerAPI.compute_log_prob)
    compute_ref = SplitRanks(ActorWorkerAPI.compute_ref)
    update_policy = SplitRanks(ActorWorkerAPI.update_policy)
    refresh_old_policy = EveryRank(ActorWorkerAPI.refresh_old_policy)
    push_weights = EveryRank(ActorWorkerAPI.push_weights)
    exported_weights = EveryRank(ActorWorkerAPI.exported_weights)
    close_weight_segment = EveryRank(ActorWorkerAPI.close_weight_segment)
    save_checkpoint = EveryRank(ActorWorkerAPI.save_checkpoint)
    load_checkpoint = EveryRank(ActorWorkerAPI.load_checkpoint)
    state_fingerprint = EveryRank(ActorWorkerAPI.state_fingerprint)
    peak_memory_gb = EveryRank(ActorWorkerAPI.peak_memory_gb)

    def shutdown(self) -> None:
        """Let every rank unlink its weight-sync segment (a kill runs no finalizer), then kill every rank."""
        import ray

        with best_effort(logger, "closing the weight-sync segments"):  # a dead or hung rank must not stop the shutdown
            self.within(10.0, "the shutdown's own bound").close_weight_segment()
        for handle in self.handles:
            with best_effort(logger, "killing an actor rank"):  # already dead
                ray.kill(handle)
        self.handles = []
