"""Ray start-up and placement: one placement group per node, one bundle per actor rank (GPU or CPU slot).

In colocated mode an actor rank and a rollout server share their bundle: each takes half of its CPU and GPU
(fractional resources), so both land on the same device.
In `trainer.mode: separate` the rollout servers get a pool of their own (`actor_rollout_ref.rollout.nnodes` x
`n_gpus_per_node` bundles), one whole bundle each, unless `trainer.separate.share_devices` puts them on the actor's
bundles as in colocated mode (one device: the separate loop's overheads can be measured there).

Placement never waits forever: a private local Ray (started by this run) that cannot hold a pool fails at once, and
any cluster fails after `trainer.ray_wait_register_center_timeout`; both errors name the pool, what it asks for and
what the cluster has (`PlacementError`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from verl_omni.trainer.config import DiffusionTrainerConfig

__all__ = ["COLOCATED_SHARE", "PlacementError", "ResourcePool", "init_ray"]

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


POOL_NAMES = {"trainer": "actor pool", "actor_rollout_ref.rollout": "rollout pool"}
"""The pool each config prefix sizes, as errors name it."""


class PlacementError(TimeoutError):
    """A resource pool cannot be placed: names the pool, its request and what the cluster has."""


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
        fail_fast (`bool`, *optional*, defaults to `False`): refuse at once a pool the cluster's free resources cannot
            hold (for a private local Ray, whose resources nothing else frees or adds), instead of waiting.
    """

    def __init__(
        self, config: DiffusionTrainerConfig, use_gpu: bool, *, prefix: str = "trainer", fail_fast: bool = False
    ) -> None:
        self.config = config
        self.use_gpu = use_gpu
        self.prefix = prefix
        self.fail_fast = fail_fast
        owner = config.trainer if prefix == "trainer" else config.actor_rollout_ref.rollout
        self.nnodes, self.per_node = owner.nnodes, owner.n_gpus_per_node
        self.groups: list[Any] = []
        self.slots: list[Slot] = []

    def create(self) -> list[Slot]:
        """Create and wait for the placement groups; return the slots in rank order.

        Raises:
            PlacementError: (a `TimeoutError`) the cluster cannot place them: at once with `fail_fast` when its free
                resources fall short, else after `trainer.ray_wait_register_center_timeout`; names the pool, the
                request and what the cluster has.
        """
        import ray
        from ray.util.placement_group import placement_group

        bundle = {"CPU": 1, "GPU": 1} if self.use_gpu else {"CPU": 1}
        asked = (
            f"{self.prefix}.nnodes={self.nnodes} x {self.prefix}.n_gpus_per_node={self.per_node} bundles of {bundle} "
            "(each node's bundles on one node)"
        )
        if self.fail_fast:
            free = ray.available_resources()
            short = {k: v * self.nnodes * self.per_node for k, v in bundle.items()}
            short = {k: v for k, v in short.items() if v > free.get(k, 0.0)}
            if short:
                raise PlacementError(
                    f"the {POOL_NAMES.get(self.prefix, self.prefix)} cannot be placed: it asks {asked}, i.e. "
                    f"{short}, and this Ray instance has {_have(ray.available_resources())} free of "
                    f"{_have(ray.cluster_resources())}{self._hint()}"
                )
        for _node in range(self.nnodes):
            pg = placement_group([dict(bundle) for _ in range(self.per_node)], strategy="STRICT_PACK")
            self.groups.append(pg)
        timeout = self.config.trainer.ray_wait_register_center_timeout
        ready, _ = ray.wait([pg.ready() for pg in self.groups], num_returns=len(self.groups), timeout=timeout)
        if len(ready) < len(self.groups):
            nodes = len([n for n in ray.nodes() if n.get("Alive")])
            self.remove()
            raise PlacementError(
                f"the {POOL_NAMES.get(self.prefix, self.prefix)} could not be placed within {timeout} s "
                f"(trainer.ray_wait_register_center_timeout): it asks {asked}; the cluster has {nodes} node(s) with "
                f"{_have(ray.cluster_resources())}, {_have(ray.available_resources())} free{self._hint()}"
            )
        self.slots = [Slot(pg, i, node) for node, pg in enumerate(self.groups) for i in range(self.per_node)]
        return self.slots

    def _hint(self) -> str:
        if self.prefix == "trainer" or not self.use_gpu:
            return ""
        return (
            "; on too few devices for a rollout pool of its own set trainer.separate.share_devices=true (the rollout "
            "servers share the actor's devices) or trainer.mode=colocated"
        )

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


def _have(resources: dict[str, float]) -> dict[str, float]:
    """The CPU and GPU entries of a Ray resource dict (what placement errors show)."""
    return {k: resources.get(k, 0.0) for k in ("CPU", "GPU")}
