"""`RewardModelService`: the reward model's verl-core rollout servers behind one OpenAI chat address, for the trainer.

`reward.reward_model.enable=true` starts a verl-core `RolloutReplica` of `reward.reward_model.rollout.name` servers
(`hf` or `vllm`) serving `reward.reward_model.model_path`, and a `ChatRouterServer` in this process that gives them
one `host:port` (`reward_router_address`): each chat request goes to the live server with the fewest requests in
flight. Placement follows verl-omni's keys:

* colocated (`enable_resource_pool: false`, the default): server `i` sits in the bundle of actor rank
  `i * tensor_model_parallel_size`, beside the actor rank and the diffusion rollout server (each takes a third of the
  bundle); with `rollout.free_cache_engine` the servers sleep outside the reward phase (`awake()` wakes them for it);
* own pool (`enable_resource_pool: true`): `nnodes * n_gpus_per_node / tensor_model_parallel_size` servers in a
  placement group of their own, always awake.

The servers' coroutines run on one event loop thread owned by this class; every call is bounded by a timeout. A
server that dies is an error naming it (`RewardModelError`), raised at the end of the phase that saw it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Iterator, Sequence
from typing import Any, TypeVar

from verl_omni.reward.reward_model import RewardModelConfig, RewardModelEndpoint

__all__ = ["RewardModelError", "RewardModelService"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

_GRACE_S = 10.0
"""Extra seconds the driver waits beyond a call's own timeout (the servers and clients time out first)."""


class RewardModelError(RuntimeError):
    """A reward model server died, hung or failed; the message names the server (rank and Ray actor)."""


class RewardModelService:
    """Reward model servers (a verl-core `RolloutReplica`) and the chat router in front of them.

    Args:
        config (`RewardModelConfig`): `reward.reward_model` (enabled).
        device (`str`): `"cpu"` or `"cuda"`: where the servers run.
        slots (`list`, *optional*): the actor ranks' bundles (`Slot`s); required when colocated.
        share (`float`, *optional*, defaults to `1/3`): share of a bundle's CPU and GPU a colocated server takes.
        threads (`int`, *optional*): torch CPU threads per server (`OMP_NUM_THREADS` of the server actors).

    Raises:
        ValueError: colocated with `tensor_model_parallel_size > 1` on GPUs, or fewer actor bundles than one server.
        RewardModelError: a server failed to start or did not start within `rollout.launch_timeout_s`.
    """

    def __init__(
        self,
        config: RewardModelConfig,
        *,
        device: str,
        slots: Sequence[Any] | None = None,
        share: float = 1 / 3,
        threads: int | None = None,
    ) -> None:
        from verl_core.rollout.chat_router import ChatRouterServer
        from verl_core.rollout.replica import RolloutReplica

        self.config = config
        rollout = config.rollout
        tp = rollout.tensor_model_parallel_size
        use_gpu = device == "cuda"
        env = {"env_vars": {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}} if threads else None
        placement_kwargs: dict[str, Any]
        if config.colocated:
            if use_gpu and tp > 1:
                raise ValueError(
                    f"reward.reward_model.rollout.tensor_model_parallel_size={tp} with a colocated reward model "
                    "(reward.reward_model.enable_resource_pool=false): a colocated server takes one GPU; set "
                    "tensor_model_parallel_size=1, or enable_resource_pool=true with nnodes / n_gpus_per_node"
                )
            chosen = list(slots or [])[::tp]
            if not chosen:
                raise ValueError("a colocated reward model needs the actor's bundles (no actor ranks were placed)")
            placement_kwargs = {
                "num_servers": len(chosen),
                "placement": [(slot.placement_group, slot.bundle_index) for slot in chosen],
                "num_cpus": share,
                "num_gpus": share if use_gpu else 0,
            }
        else:
            placement_kwargs = {"num_servers": config.nnodes * config.n_gpus_per_node // tp, "num_cpus": 1.0}
        self.sleeps = config.colocated and rollout.free_cache_engine
        self.prefix = f"verl_omni_reward_{uuid.uuid4().hex[:8]}"
        self.replica = RolloutReplica(
            config.server_config(device),
            use_gpu=use_gpu,
            name_prefix=self.prefix,
            runtime_env=env,
            **placement_kwargs,
        )
        self.num_servers = placement_kwargs["num_servers"]
        self.proxy: Any = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="reward-model-driver", daemon=True)
        self._thread.start()
        self.addresses: list[str] = []
        try:
            self.addresses = self._run(self.replica.launch(), "launch", rollout.launch_timeout_s)
            assert self.replica.router is not None  # launch() set it
            self.proxy = ChatRouterServer(self.replica.router)
            self._run(self.proxy.start(), "launch", rollout.launch_timeout_s)
            if self.sleeps:  # the actor trains first: the reward model wakes for its phase only
                self._broadcast("sleep")
        except BaseException:
            self.shutdown()
            raise
        self.endpoint = RewardModelEndpoint(
            router_address=self.proxy.address, model_name=str(config.model_path), tokenizer_path=str(config.model_path)
        )
        where = "colocated with the actor" if config.colocated else "on its own pool"
        logger.info(
            "reward model: %d %s server(s) %s at %s, router %s",
            self.num_servers,
            rollout.name,
            where,
            ", ".join(self.addresses),
            self.proxy.address,
        )

    # ---- the calls the trainer makes ----------------------------------------------------------------

    @contextlib.contextmanager
    def awake(self, what: str, timing: dict[str, float] | None = None) -> Iterator[None]:
        """Wake the servers for the phase `what` (when they sleep between phases); check them and sleep after it.

        With `timing`, the seconds the wake-up and the sleep took are added to its `reward_model_wake` /
        `reward_model_sleep` (only when the servers sleep between phases: colocated with `free_cache_engine`).

        Raises:
            RewardModelError: a server died during `what` (names it; chained to the phase's own error if any).
        """
        if self.sleeps:
            with _timed(timing, "reward_model_wake"):
                self._broadcast("wake_up", what)
        try:
            yield
        except Exception as e:
            self.check(what, e)
            raise
        self.check(what)
        if self.sleeps:
            with _timed(timing, "reward_model_sleep"):
                self._broadcast("sleep", what)

    def check(self, what: str, cause: BaseException | None = None) -> None:
        """Raise `RewardModelError` naming the first server the router found dead during `what`."""
        router = self.replica.router
        if router is None or not router.dead:
            return
        rank, reason = min(router.dead.items())
        raise RewardModelError(
            f"reward model server rank {rank} (Ray actor {self.prefix}_server_{rank}) died during {what}: {reason}"
        ) from cause

    def server_metrics(self) -> dict[int, dict[str, Any]]:
        """Server rank -> its `/metrics` snapshot (`chat_completions`, `sleeps`, ...)."""
        router = self.replica.router
        assert router is not None
        return self._run(router.broadcast("metrics"), "metrics", self.config.rollout.lifecycle_timeout_s)

    def shutdown(self) -> None:
        """Stop the router, every server and the event loop thread (safe to call twice)."""
        if self._loop.is_closed():
            return
        try:
            if self.proxy is not None:
                self._run(self.proxy.stop(), "shutdown", _GRACE_S)
            timeout = self.config.rollout.lifecycle_timeout_s * (self.num_servers + 1)
            self._run(self.replica.shutdown(), "shutdown", timeout)
        except Exception as e:  # a dead server cannot shut down; the replica kills its actor anyway
            logger.warning("reward model shutdown: %s", e)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            if not self._loop.is_running():
                self._loop.close()

    # ---- helpers ------------------------------------------------------------------------------------

    def _broadcast(self, method: str, what: str = "start-up") -> None:
        """Call `method` on every server; each must answer within `rollout.lifecycle_timeout_s`."""
        call = getattr(self.replica, method)()
        results = self._run(call, f"{method} ({what})", self.config.rollout.lifecycle_timeout_s)
        self.check(f"{method} ({what})")
        missing = sorted(set(range(self.num_servers)) - set(results))
        if missing:
            raise RewardModelError(f"reward model server rank(s) {missing} gave no answer to {method} ({what})")

    def _run(self, coro: Awaitable[T], what: str, timeout: float) -> T:
        """Run `coro` on the loop thread within `timeout` (+ a grace); map every failure to `RewardModelError`."""
        if self._loop.is_closed():
            raise RewardModelError(f"reward model servers are shut down; cannot {what}")
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            return future.result(timeout + _GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RewardModelError(
                f"reward model servers did not finish {what} within {timeout + _GRACE_S:g} s "
                "(reward.reward_model.rollout timeouts); a server is hung or too slow"
            ) from None
        except RewardModelError:
            raise
        except Exception as e:
            rank = getattr(e, "server_rank", getattr(e, "rank", None))
            where = f"reward model server rank {rank}" if rank is not None and rank >= 0 else "reward model servers"
            raise RewardModelError(f"{where} failed during {what}: {type(e).__name__}: {e}") from e
        except BaseException:  # Ctrl-C: the coroutine must not run on once its caller has gone
            future.cancel()
            raise


@contextlib.contextmanager
def _timed(timing: dict[str, float] | None, key: str) -> Iterator[None]:
    """Add the block's seconds to `timing[key]` (nothing without `timing`)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        if timing is not None:
            timing[key] = timing.get(key, 0.0) + time.perf_counter() - start
