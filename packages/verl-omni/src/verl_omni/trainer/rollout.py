"""`ColocatedRollout`: one rollout server per actor bundle, requests spread over them, lifecycle with timeouts.

INTERIM: the servers are `InterimRolloutServer` Ray actors (no HTTP) until the `diffusers` backend and the agent
loop land; then this class wraps verl-core's `RolloutReplica` placed in the same bundles.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from typing import Any

from tensordict import TensorDict

from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.trainer._interim import InterimRolloutServer, concat_trajectories
from verl_omni.trainer.placement import ResourcePool, Slot

__all__ = ["ColocatedRollout", "RolloutServiceError"]


class RolloutServiceError(RuntimeError):
    """A rollout server died, hung or failed; the message names the server rank and the call."""


class ColocatedRollout:
    """Rollout servers placed in the actor ranks' bundles.

    Args:
        pool (`ResourcePool`): the placement groups; server `r` goes to slot `r`.
        slots (`list[Slot]`): the bundles.
        model_path (`str`): the pipeline folder.
        device (`str`): `"cuda"` or `"cpu"`.
        dtype (`str`): rollout weights dtype.
        request_timeout_s (`float`): bound of one request.
        lifecycle_timeout_s (`float`): bound of sleep / wake-up.
        launch_timeout_s (`float`): bound of server start-up.
        threads (`int`, *optional*): torch CPU threads per server.
    """

    def __init__(
        self,
        pool: ResourcePool,
        slots: Sequence[Slot],
        *,
        model_path: str,
        device: str,
        dtype: str,
        request_timeout_s: float,
        lifecycle_timeout_s: float,
        launch_timeout_s: float,
        threads: int | None = None,
    ) -> None:
        import ray

        self.request_timeout_s = request_timeout_s
        self.lifecycle_timeout_s = lifecycle_timeout_s
        remote = ray.remote(InterimRolloutServer)
        self.servers = [
            remote.options(**pool.options(slot)).remote(model_path, device, dtype, threads) for slot in slots
        ]
        self._wait([s.ping.remote() for s in self.servers], "launch", launch_timeout_s)

    def _wait(self, refs: list[Any], what: str, timeout: float) -> list[Any]:
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        deadline = time.monotonic() + timeout
        pending = list(refs)
        while pending:
            left = deadline - time.monotonic()
            done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, min(left, 1.0)))  # Ctrl-C works
            if not done and left > 1.0:
                continue
            if not done:
                ranks = sorted({self._rank_of(refs, p) for p in pending})
                raise RolloutServiceError(
                    f"rollout server rank(s) {ranks} did not finish {what} within {timeout:g} s "
                    "(actor_rollout_ref.rollout timeouts); the server is hung or too slow"
                )
            try:
                ray.get(done[0])
            except (RayActorError, RayTaskError) as e:
                rank = self._rank_of(refs, done[0])
                kind = "died" if isinstance(e, RayActorError) else "failed"
                raise RolloutServiceError(f"rollout server rank {rank} {kind} during {what}: {e}") from e
        return ray.get(refs)

    def _rank_of(self, refs: list[Any], ref: Any) -> int:
        return refs.index(ref) % len(self.servers)

    def generate(self, records: Sequence[Any], sampling: DiffusionSamplingConfig, seed: int) -> TensorDict:
        """One request per prompt (rows seeded `seed + i*n + r`), round-robin over the servers."""
        refs = [
            self.servers[i % len(self.servers)].generate.remote(rec.prompt, sampling, seed + i * sampling.n)
            for i, rec in enumerate(records)
        ]
        results = self._wait(refs, "generate", self.request_timeout_s)
        return concat_trajectories([r["trajectory"] for r in results], sampling.n)

    def sleep(self) -> None:
        """Free the servers' accelerator memory."""
        self._wait([s.sleep.remote() for s in self.servers], "sleep", self.lifecycle_timeout_s)

    def wake_up(self) -> None:
        """Restore the servers."""
        self._wait([s.wake_up.remote() for s in self.servers], "wake_up", self.lifecycle_timeout_s)

    def weight_targets(self) -> list[Any]:
        """The server handles (actor rank 0 calls their `update_weights`)."""
        return list(self.servers)

    def weight_versions(self) -> dict[int, int]:
        """Server rank -> served weight version."""
        versions = self._wait([s.ping.remote() for s in self.servers], "ping", self.lifecycle_timeout_s)
        return dict(enumerate(versions))

    def shutdown(self) -> None:
        """Kill the servers."""
        import ray

        for server in self.servers:
            with contextlib.suppress(Exception):  # already dead
                ray.kill(server)
        self.servers = []
