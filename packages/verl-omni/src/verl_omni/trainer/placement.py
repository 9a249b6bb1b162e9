"""Ray start-up and placement: one placement group per node, one bundle per actor rank (GPU or CPU slot).

In colocated mode an actor rank and a rollout server share their bundle: each takes half of its CPU and GPU
(fractional resources), so both land on the same device.
In `trainer.mode: separate` the rollout servers get a pool of their own (`actor_rollout_ref.rollout.nnodes` x
`n_gpus_per_node` bundles), one whole bundle each.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from verl_omni.trainer.config import DiffusionTrainerConfig

__all__ = ["COLOCATED_SHARE", "ResourcePool", "init_ray"]

logger = logging.getLogger(__name__)

COLOCATED_SHARE = 0.5
"""Share of a bundle's CPU and GPU each colocated worker (actor rank, rollout server) asks for."""


def init_ray(config: DiffusionTrainerConfig, *, extra_cpus: int = 0) -> bool:
    """Start or join Ray as `ray_kwargs.ray_init` says; return True when this call started it.

    A local Ray gets at least as many logical CPUs as the run places (`world_size` bundles plus `extra_cpus`), so a
    small machine can still schedule every worker; real CPU use is bounded by `trainer.cpu_threads_per_worker`.
    """
    import ray

    if ray.is_initialized():
        return False
    init = config.ray_kwargs.ray_init
    kwargs: dict[str, Any] = {"include_dashboard": init.include_dashboard, "log_to_driver": True}
    if init.namespace:
        kwargs["namespace"] = init.namespace
    if init.runtime_env:
        kwargs["runtime_env"] = dict(init.runtime_env)
    address = init.address or os.environ.get("RAY_ADDRESS")
    if address:
        kwargs["address"] = address
    else:  # a private local instance: never join a Ray some other job started on this host
        kwargs["address"] = "local"
        needed = config.trainer.world_size + extra_cpus
        kwargs["num_cpus"] = init.num_cpus if init.num_cpus is not None else max(os.cpu_count() or 1, needed)
        if init.num_gpus is not None:
            kwargs["num_gpus"] = init.num_gpus
    ray.init(**kwargs)
    return True


@dataclass
class Slot:
    """One bundle: where an actor rank (and its colocated rollout server) runs."""

    placement_group: Any
    bundle_index: int
    node: int


class ResourcePool:
    """`trainer.nnodes` placement groups (STRICT_PACK) of `trainer.n_gpus_per_node` bundles each.

    Args:
        config (`DiffusionTrainerConfig`): nodes, ranks per node, device, start-up timeout.
        use_gpu (`bool`): bundles of one GPU (and one CPU) each, else one CPU each.
        prefix (`str`, *optional*, defaults to `"trainer"`): whose `nnodes` / `n_gpus_per_node` size the pool:
            `"trainer"` (the actor ranks) or `"actor_rollout_ref.rollout"` (the rollout's own pool in
            `trainer.mode: separate`).
    """

    def __init__(self, config: DiffusionTrainerConfig, use_gpu: bool, *, prefix: str = "trainer") -> None:
        self.config = config
        self.use_gpu = use_gpu
        self.prefix = prefix
        owner = config.trainer if prefix == "trainer" else config.actor_rollout_ref.rollout
        self.nnodes, self.per_node = owner.nnodes, owner.n_gpus_per_node
        self.groups: list[Any] = []
        self.slots: list[Slot] = []

    def create(self) -> list[Slot]:
        """Create and wait for the placement groups; return the slots in rank order.

        Raises:
            TimeoutError: the cluster cannot place them within `trainer.ray_wait_register_center_timeout` (names the
                request and what the cluster has).
        """
        import ray
        from ray.util.placement_group import placement_group

        trainer = self.config.trainer
        bundle = {"CPU": 1, "GPU": 1} if self.use_gpu else {"CPU": 1}
        for _node in range(self.nnodes):
            pg = placement_group([dict(bundle) for _ in range(self.per_node)], strategy="STRICT_PACK")
            self.groups.append(pg)
        timeout = trainer.ray_wait_register_center_timeout
        ready, _ = ray.wait([pg.ready() for pg in self.groups], num_returns=len(self.groups), timeout=timeout)
        if len(ready) < len(self.groups):
            have = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
            nodes = len([n for n in ray.nodes() if n.get("Alive")])
            self.remove()
            raise TimeoutError(
                f"{self.prefix}.nnodes={self.nnodes} x {self.prefix}.n_gpus_per_node={self.per_node} bundles of "
                f"{bundle} (one node each group) could not be placed within {timeout} s "
                f"(trainer.ray_wait_register_center_timeout); the cluster has {nodes} node(s) with {have}"
            )
        self.slots = [Slot(pg, i, node) for node, pg in enumerate(self.groups) for i in range(self.per_node)]
        return self.slots

    def options(self, slot: Slot, *, share: float = COLOCATED_SHARE) -> dict[str, Any]:
        """Ray `.options(...)` placing an actor in `slot` with `share` of its CPU and GPU."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {
            "num_cpus": share,
            "num_gpus": share if self.use_gpu else 0,
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                slot.placement_group, placement_group_bundle_index=slot.bundle_index
            ),
        }

    def remove(self) -> None:
        """Free every placement group."""
        import ray

        for pg in self.groups:
            try:
                ray.util.remove_placement_group(pg)
            except Exception as e:  # already removed with the cluster
                logger.debug("remove_placement_group: %s", e)
        self.groups, self.slots = [], []
