"""`ColocatedRollout`: the trainer's rollout, a verl-core `RolloutReplica` of `diffusers` servers in the actor bundles.

Server `r` is a Ray actor in the bundle of actor rank `r` (half of its CPU and GPU), serving over HTTP; requests go
through the diffusion agent loop (`rollout.agent.default_agent_loop`), trajectories come back as binary tensors.
The replica's coroutines run on one event loop thread owned by this class, so the synchronous trainer can call
them; every call is bounded by a timeout, and a server that died, hung or failed is a `RolloutServiceError` naming
its rank and the call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from tensordict import TensorDict

from verl_core.best_effort import best_effort
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.trainer.placement import COLOCATED_SHARE, Slot

__all__ = ["ColocatedRollout", "RolloutServiceError"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

_GRACE_S = 10.0
"""Extra seconds the driver waits beyond a call's own timeout (the servers and clients time out first)."""


_TIMEOUT_KEYS = {"generate": "request_timeout_s", "launch": "launch_timeout_s"}
"""The `actor_rollout_ref.rollout.*` timeout that bounds each call (the others: `lifecycle_timeout_s`)."""


def _timed_out(error: BaseException | None) -> bool:
    """Whether `error` or one of its causes is a timeout."""
    while error is not None:
        if isinstance(error, TimeoutError):
            return True
        error = error.__cause__
    return False


class RolloutServiceError(RuntimeError):
    """A rollout server died, hung or failed; the message names the server rank and the call."""


class ColocatedRollout:
    """`RolloutReplica` of one server per actor bundle, driven synchronously through the diffusion agent loop.

    Args:
        config (`DiffusionRolloutConfig`): `actor_rollout_ref.rollout` with `model` set (`with_model`) and `device`
            set to where the servers run.
        slots (`list[Slot]`): the actor ranks' bundles; server `r` goes to `slots[r]`.
        use_gpu (`bool`): each server takes `COLOCATED_SHARE` of its bundle's GPU (else of its CPU only).
        threads (`int`, *optional*): torch CPU threads per server (`OMP_NUM_THREADS` of the server actors).
        share (`float`, *optional*): share of its bundle's CPU and GPU each server takes (`COLOCATED_SHARE`; a third
            when a colocated reward model shares the bundle too).

    Raises:
        RolloutServiceError: a server failed to start or did not start within `rollout.launch_timeout_s`.
    """

    def __init__(
        self,
        config: DiffusionRolloutConfig,
        slots: Sequence[Slot],
        *,
        use_gpu: bool,
        threads: int | None = None,
        share: float = COLOCATED_SHARE,
    ) -> None:
        from verl_core.rollout.replica import RolloutReplica
        from verl_omni.rollout import get_agent_loop

        self.last_request_metrics: dict[str, float] = {}  # of the latest generate (request_overhead_metrics)
        self.config = config
        self.num_servers = len(slots)
        env = {"env_vars": {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}} if threads else None
        self.replica = RolloutReplica(
            config,
            num_servers=self.num_servers,
            use_gpu=use_gpu,
            name_prefix=f"verl_omni_rollout_{uuid.uuid4().hex[:8]}",
            placement=[(slot.placement_group, slot.bundle_index) for slot in slots],
            num_cpus=share,
            num_gpus=share if use_gpu else 0,
            runtime_env=env,
            file_handoff=True,  # servers at a loopback address (one host) answer through /dev/shm, others HTTP
        )
        self.agent_loop = get_agent_loop(config.agent.default_agent_loop)(
            self.replica,
            timeout_s=config.request_timeout_s,
            prompts_per_request=prompts_per_request(config),
            max_images_per_request=config.agent.max_images_per_request,
        )
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(_quiet_cancelled)
        self._thread = threading.Thread(target=self._loop.run_forever, name="rollout-driver", daemon=True)
        self._thread.start()
        self.addresses: list[str] = []
        try:
            self.addresses = self._run(self.replica.launch(), "launch", config.launch_timeout_s)
        except BaseException:
            self.shutdown()
            raise
        logger.info("rollout: %d %s server(s) at %s", self.num_servers, config.name, ", ".join(self.addresses))

    @property
    def servers(self) -> list[Any]:
        """The servers' Ray actor handles, rank order."""
        return list(self.replica.actors)

    # ---- the calls the trainer makes ----------------------------------------------------------------

    def generate(
        self,
        records: Sequence[Any],
        sampling: DiffusionSamplingConfig,
        seed: int,
        on_request_done: Callable[[int, int, TensorDict], None] | None = None,
    ) -> TensorDict:
        """The records through the agent loop (`rollout.agent.prompts_per_request` a request), over the servers.

        Record `i`'s rows are seeded `seed + i*n + r` whatever the grouping. `on_request_done(start, count, rows)`
        is called on the driver's event loop as each request finishes (reward streaming, `reward.stream`).

        Returns:
            The trajectories, prompt-major, with `prompt_index`, `seed`, `weight_version` and `server_rank` per row.
        """
        negatives = [getattr(rec, "negative_prompt", None) for rec in records]
        call = self.agent_loop.generate(
            [rec.prompt for rec in records],
            sampling=sampling,
            seed=seed,
            negative_prompts=negatives if any(n is not None for n in negatives) else None,
            on_request_done=on_request_done,
        )
        out = self._run(call, "generate", self.config.request_timeout_s)
        self.last_request_metrics = request_overhead_metrics(
            per_request(out.latency_s, out.request_index), per_request(out.server_latency_s, out.request_index)
        )
        return out.trajectory

    def sleep(self) -> None:
        """Free the servers' accelerator memory (`rollout.sleep_level`)."""
        self._broadcast(self.replica.sleep(), "sleep", self.config.lifecycle_timeout_s)

    def wake_up(self) -> None:
        """Restore what `sleep` freed."""
        self._broadcast(self.replica.wake_up(), "wake_up", self.config.lifecycle_timeout_s)

    def weight_targets(self) -> list[str]:
        """The servers' HTTP addresses, rank order (actor rank 0 streams `update_weights` to them)."""
        return list(self.addresses)

    def check_alive(self, what: str) -> None:
        """Probe every server's /health; raise naming the first one that is dead (`what`: the call that failed).

        Raises:
            RolloutServiceError: "rollout server rank r died during `what`: ..." (its process gone, unreachable), or
                a server that did not answer within `rollout.lifecycle_timeout_s`.
        """
        router = self.replica.router
        if router is None:
            raise RolloutServiceError(f"rollout servers are not running (no router); cannot check them after {what}")
        self._broadcast(router.check_health(), what, self.config.lifecycle_timeout_s)

    def weight_versions(self) -> dict[int, int]:
        """Server rank -> the weight version it serves (from each server's `/metrics`)."""
        return {rank: int(snap["weight_version"]) for rank, snap in self.server_metrics().items()}

    def server_metrics(self) -> dict[int, dict[str, Any]]:
        """Server rank -> its `/metrics` snapshot (counters such as `sleeps`, `weight_updates`, `images_generated`)."""
        router = self.replica.router
        if router is None:
            raise RolloutServiceError("rollout servers are not running (no router); cannot read their /metrics")
        return self._broadcast(router.broadcast("metrics"), "metrics", self.config.lifecycle_timeout_s)

    def served_weights(self, names: list[str], kind: str) -> dict[int, dict[str, Any] | BaseException] | None:
        """Server rank -> the CPU tensors it serves under `names`, or the error its read-back raised.

        Read through each server's Ray actor (`RolloutHttpServer.served_weights`); a name the server does not
        serve comes back as its `BadRequestError`.

        Returns:
            None when the backend cannot read back `kind` tensors (its `readable_weight_kinds`).

        Raises:
            RolloutServiceError: a server died or did not answer within `rollout.lifecycle_timeout_s`.
        """
        from ray.exceptions import RayActorError, RayTaskError

        if kind not in getattr(self.replica.server_cls, "readable_weight_kinds", ("full", "lora")):
            return None

        async def read() -> list[Any]:
            refs = [actor.served_weights.remote(list(names), kind=kind) for actor in self.servers]
            return await asyncio.gather(*refs, return_exceptions=True)

        out: dict[int, dict[str, Any] | BaseException] = {}
        for rank, result in enumerate(self._run(read(), "served_weights", self.config.lifecycle_timeout_s)):
            if isinstance(result, RayActorError):
                raise RolloutServiceError(f"rollout server rank {rank} died during served_weights: {result}")
            if isinstance(result, RayTaskError):  # the server's own error (e.g. BadRequestError: not served)
                result = result.cause if isinstance(getattr(result, "cause", None), BaseException) else result
            if isinstance(result, BaseException) and not isinstance(result, Exception):
                raise result
            out[rank] = result
        return out

    def shutdown(self) -> None:
        """Stop every server and the event loop thread (safe to call twice)."""
        if self._loop.is_closed():
            return
        try:
            # a call cut short (Ctrl-C during the launch or a request) leaves tasks on the loop, the agent loop's
            # requests among them: cancel and await them first, so that none fails against a server shut down
            # (a "server is dead" warning) or is destroyed while pending when the loop closes
            cancel = asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), self._loop)
            with best_effort(logger, "cancelling the rollout loop's pending tasks"):
                cancel.result(_GRACE_S)
            timeout = self.config.lifecycle_timeout_s * (self.num_servers + 1)
            self._run(self.replica.shutdown(), "shutdown", timeout)
        except Exception as e:  # a dead server cannot shut down; the replica kills its actor anyway
            logger.warning("rollout shutdown: %s", e)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._loop.is_running():
                self._loop.close()

    # ---- helpers ------------------------------------------------------------------------------------

    def _broadcast(self, call: Awaitable[dict[int, T]], what: str, timeout: float) -> dict[int, T]:
        """Run a replica broadcast; every server must answer (the replica leaves dead ones out)."""
        results = self._run(call, what, timeout)
        missing = sorted(set(range(self.num_servers)) - set(results))
        if missing:
            self._raise_dead(what)
            raise RolloutServiceError(f"rollout server rank(s) {missing} gave no answer to {what}")
        return results

    def _run(self, coro: Awaitable[T], what: str, timeout: float) -> T:
        """Run `coro` on the loop thread within `timeout` (+ a grace); map every failure to `RolloutServiceError`."""
        if self._loop.is_closed():
            raise RolloutServiceError(f"rollout servers are shut down; cannot {what}")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            result = future.result(timeout + _GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RolloutServiceError(
                f"rollout servers did not finish {what} within {timeout + _GRACE_S:g} s (actor_rollout_ref.rollout "
                "timeouts); a server is hung or too slow"
            ) from None
        except RolloutServiceError:
            raise
        except Exception as e:
            self._raise_dead(what, e)
            rank = getattr(e, "server_rank", getattr(e, "rank", None))
            where = f"rollout server rank {rank}" if rank is not None and rank >= 0 else "rollout servers"
            bound = f" (bound by actor_rollout_ref.rollout.{_TIMEOUT_KEYS.get(what, 'lifecycle_timeout_s')})"
            hint = bound if _timed_out(e) else ""
            raise RolloutServiceError(f"{where} failed during {what}: {type(e).__name__}: {e}{hint}") from e
        except BaseException:  # Ctrl-C: the coroutine must not run on once its caller has gone
            future.cancel()
            raise
        if what != "shutdown":
            self._raise_dead(what)
        return result

    def _raise_dead(self, what: str, cause: BaseException | None = None) -> None:
        """Raise naming the first server the replica's router marked dead (the colocated trainer needs them all)."""
        router = self.replica.router
        if router is None or not router.dead:
            return
        rank, reason = min(router.dead.items())
        raise RolloutServiceError(f"rollout server rank {rank} died during {what}: {reason}") from cause


def _quiet_cancelled(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler: a `CancelledError` nobody retrieved is a call cut short, not an error.

    On Python 3.11 a `gather` under a cancelled `wait_for` (the servers' launch, cut short by Ctrl-C) is left holding
    the `CancelledError`, which asyncio would log as "exception was never retrieved"; everything else is logged as
    asyncio's default handler does.
    """
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


async def _cancel_other_tasks() -> None:
    """Cancel every task of the running loop but this one and wait until they have finished."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def prompts_per_request(config: DiffusionRolloutConfig) -> int:
    """`rollout.agent.prompts_per_request` for the agent loop: auto (0) is 1 on backends without prompt lists.

    Only the `diffusers` backend serves multi-prompt requests; an explicit value is passed as set.
    """
    return config.agent.prompts_per_request or (0 if config.name == "diffusers" else 1)


def per_request(values: Sequence[float], request_index: Sequence[int]) -> list[float]:
    """One value per request from per-prompt `values` (the first prompt's); no `request_index`: `values` as given."""
    if not request_index:
        return list(values)
    seen: dict[int, float] = {}
    for value, request in zip(values, request_index, strict=True):
        seen.setdefault(request, value)
    return list(seen.values())


def request_overhead_metrics(client_s: Sequence[float], server_s: Sequence[float]) -> dict[str, float]:
    """Transport + codec time of a step's requests: the client's round trip minus the server's own `latency_s`.

    `timing_s/gen_request_overhead` (mean seconds per request) and `timing_share/gen_request_overhead` (of the
    summed round trips); empty when a server did not report its latency.
    """
    if not client_s or len(server_s) != len(client_s) or any(s != s for s in server_s):  # NaN: not reported
        return {}
    over = [max(c - s, 0.0) for c, s in zip(client_s, server_s, strict=True)]
    return {
        "timing_s/gen_request_overhead": sum(over) / len(over),
        "timing_share/gen_request_overhead": sum(over) / max(sum(client_s), 1e-12),
    }
