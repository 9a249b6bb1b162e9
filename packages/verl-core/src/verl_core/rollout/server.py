"""`RolloutHttpServer`: the engine-agnostic rollout server base (HTTP app, lifecycle, timeouts, status).

Every server owns one event loop on a thread of its own; uvicorn and the engine run on it. The public lifecycle methods
are coroutines that may be awaited from any loop (a Ray actor's, a test's `asyncio.run`): they hop onto the server loop.
Subclasses implement only the `_engine_*` hooks (`verl_core.rollout.engine_hooks.EngineHooks`). Weight sync lives in
`verl_core.rollout.server_weights`.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError

from verl_core.best_effort import best_effort
from verl_core.config.rollout import RolloutBaseConfig
from verl_core.rollout.chat import ChatCompletionRequest, chat_inputs
from verl_core.rollout.engine_hooks import EngineHooks
from verl_core.rollout.engine_thread import EngineThread
from verl_core.rollout.errors import (
    BadRequestError,
    ConflictError,
    EngineError,
    EngineTimeoutError,
    NotReadyError,
    RolloutError,
)
from verl_core.rollout.handoff import HandoffFiles
from verl_core.rollout.metrics import ServerMetrics
from verl_core.rollout.net import SERVER_KEEP_ALIVE_S, advertised_host, bind_socket, validation_message
from verl_core.rollout.protocol import GenerateRequest, GenerateResponse
from verl_core.rollout.server_weights import WeightSyncMixin

if TYPE_CHECKING:  # `openai` loads only in the modules that build a chat answer (`verl_core.rollout.chat`)
    from openai.types.chat import ChatCompletion

__all__ = ["RolloutHttpServer", "ServerState"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)


class ServerState(str, enum.Enum):
    """Where a server is in its lifecycle."""

    CREATED = "created"
    LAUNCHING = "launching"
    READY = "ready"
    SLEEPING = "sleeping"
    FAILED = "failed"
    STOPPED = "stopped"


class RolloutHttpServer(WeightSyncMixin, EngineHooks):
    """Engine-agnostic rollout server: FastAPI app on uvicorn plus Python lifecycle methods.

    Lifecycle: `launch` → (`generate` | `abort` | `sleep` → `wake_up` | `update_weights`)* → `shutdown`.
    Routes: `GET /health`, `GET /ready`, `GET /metrics`, `POST /generate`, `/v1/chat/completions`, `/abort`, `/sleep`,
    `/wake_up`, `/update_weights`, `/update_weights_shm`. Every engine call is bounded by a timeout from
    `RolloutBaseConfig`; a hung engine surfaces as `EngineTimeoutError` (HTTP 504). Weight sync (`update_weights`,
    `update_weights_shm`, `served_weights`, `weight_version`) comes from `WeightSyncMixin`
    (`verl_core.rollout.server_weights`).

    Subclasses implement the `_engine_*` hooks of `EngineHooks` and may set `request_model` / `response_model`.

    Args:
        config (`RolloutBaseConfig`): backend, model, binding, timeouts and limits (LLM: `RolloutConfig`).
        rank (`int`, *optional*, defaults to `0`): the server's rank in its replica (seeds, names).

    Raises:
        TypeError: `config` is not a `RolloutBaseConfig`.
    """

    request_model: ClassVar[type[GenerateRequest]] = GenerateRequest
    response_model: ClassVar[type[GenerateResponse]] = GenerateResponse

    def __init__(self, config: RolloutBaseConfig, *, rank: int = 0) -> None:
        if not isinstance(config, RolloutBaseConfig):
            raise TypeError(f"config must be a RolloutBaseConfig, got {type(config).__name__}")
        self.config = config
        self.rank = rank
        self._state = ServerState.CREATED
        self._asleep: set[str] = set()
        self._exclusive: str | None = None
        self._inflight: dict[str, asyncio.Task] = {}
        self._drained: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._engine_thread: EngineThread | None = None
        self._http: Any = None
        self._serve_task: asyncio.Task | None = None
        self._address: str | None = None
        self.metrics = ServerMetrics()
        # same-host hand-off files not claimed yet: removed after the request timeout + 60 s, and at shutdown
        self.handoff_files = HandoffFiles(grace_s=config.request_timeout_s + 60)
        self._init_weight_sync()

    @property
    def address(self) -> str:
        """Base URL of the HTTP app, e.g. `http://127.0.0.1:8000`."""
        if self._address is None:
            raise NotReadyError("the server has no address yet; await launch() first")
        return self._address

    @property
    def state(self) -> ServerState:
        """Lifecycle state."""
        return self._state

    # ---- lifecycle ------------------------------------------------------------------------------

    async def launch(self) -> str:
        """Start the engine and the HTTP app; return the base URL.

        Raises:
            ConflictError: launch was already called.
            EngineTimeoutError: the engine took longer than `rollout.launch_timeout_s`.
        """
        if self._state is not ServerState.CREATED:
            raise ConflictError(f"launch() was already called; the server is {self._state.value}")
        self._state = ServerState.LAUNCHING
        loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name=f"rollout-server-{self.rank}", daemon=True)
        self._thread.start()
        self._loop = loop
        try:
            return await self._on_loop(self._launch_impl())
        except BaseException:
            self._state = ServerState.FAILED
            await self.shutdown()
            self._state = ServerState.FAILED
            raise

    async def generate(self, request: GenerateRequest | Mapping[str, Any]) -> GenerateResponse:
        """Serve one request (a `request_model` or a dict of its fields).

        Raises:
            BadRequestError: invalid fields or sampling parameters (names the field).
            NotReadyError: asleep, busy with a weight update, at capacity, or shut down.
            ConflictError: the request id is already in flight.
            EngineTimeoutError: no answer within `timeout_s` / `rollout.request_timeout_s`.
        """
        return await self._on_loop(self._generate_impl(request))

    async def chat(self, request: ChatCompletionRequest | Mapping[str, Any]) -> ChatCompletion:
        """Serve one OpenAI chat request (a `ChatCompletionRequest` or a dict of its fields) like `generate`.

        Raises:
            BadRequestError: an unknown field, a bad value or a malformed image (names the field).
            NotReadyError: asleep, busy with a weight update, at capacity, or shut down.
            UnsupportedError: the backend serves no chat (`_engine_chat` not implemented).
            EngineTimeoutError: no answer within `rollout.request_timeout_s`.
        """
        return await self._on_loop(self._chat_impl(request))

    async def abort(self, request_ids: Iterable[str] | None = None) -> list[str]:
        """Abort these in-flight requests (all when None); return the ids that were in flight."""
        return await self._on_loop(self._abort_impl(None if request_ids is None else list(request_ids)))

    async def sleep(self, level: int | None = None) -> ServerState:
        """Free accelerator memory after in-flight requests drain (`level` defaults to `rollout.sleep_level`)."""
        return await self._on_loop(self._sleep_impl(self._default_sleep_level() if level is None else level))

    async def wake_up(self, tags: list[str] | None = None) -> ServerState:
        """Restore what `sleep` freed; `tags` restores only `"weights"` or `"kv_cache"`."""
        return await self._on_loop(self._wake_impl(tags))

    async def shutdown(self) -> None:
        """Abort in-flight requests, stop the HTTP app and the engine, and stop the server loop (idempotent)."""
        loop = self._loop
        if loop is None:
            return
        try:
            await self._on_loop(self._shutdown_impl())
        except Exception as e:  # shutting down must not raise halfway
            logger.warning("rollout server %d: error while shutting down: %s", self.rank, e)
        finally:
            self._loop = None
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=10)
            if not loop.is_running():
                loop.close()
            if self._engine_thread is not None:
                self._engine_thread.stop()
                self._engine_thread = None
            self._state = ServerState.STOPPED

    # ---- status ---------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """Liveness: the server loop runs (the engine may still be loading)."""
        return {"status": "ok", "state": self._state.value, "rank": self.rank}

    def readiness(self) -> tuple[bool, str]:
        """Whether generates are served now, and why not."""
        if self._state is not ServerState.READY:
            return False, f"server is {self._state.value}"
        if not self._weights_consistent:
            return False, "a full weight update failed halfway; send a complete update_weights"
        if self._exclusive:
            return False, f"server is busy with {self._exclusive}"
        return True, "ready"

    def metrics_snapshot(self) -> dict[str, Any]:
        """Counters and latency percentiles, plus backend metrics."""
        return {
            **self.metrics.snapshot(),
            "state": self._state.value,
            "weight_version": self._weight_version,
            "inflight": len(self._inflight),
            "rank": self.rank,
            **self._engine_metrics(),
        }

    # ---- helpers for subclasses -----------------------------------------------------------------

    async def _run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run blocking engine work on the server's single engine thread."""
        if self._engine_thread is None:
            self._engine_thread = EngineThread(f"rollout-engine-{self.rank}")
        return await self._engine_thread.run(fn, *args)

    async def _timed(self, op: str, key: str, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        """Await `awaitable` within `timeout` (default `rollout.<key>`), mapping failures to rollout errors."""
        limit = timeout if timeout is not None else getattr(self.config, key)
        try:
            return await asyncio.wait_for(awaitable, limit)
        except RolloutError:
            raise
        except asyncio.TimeoutError:
            self.metrics.count("timeouts")
            raise EngineTimeoutError(
                f"{op} did not finish within {limit:g} s (rollout.{key}); the engine may be hung"
            ) from None
        except (ValueError, TypeError, KeyError) as e:
            raise BadRequestError(f"{op}: {type(e).__name__}: {e}") from e
        except Exception as e:
            raise EngineError(f"engine failed during {op}: {type(e).__name__}: {e}") from e

    # ---- implementation (runs on the server loop) -----------------------------------------------

    async def _on_loop(self, coro: Awaitable[T]) -> T:
        loop = self._loop
        if loop is None or loop.is_closed():
            if asyncio.iscoroutine(coro):
                coro.close()
            raise NotReadyError(f"server is {self._state.value}; call launch() first")
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))  # type: ignore[arg-type]

    async def _launch_impl(self) -> str:
        import uvicorn

        from verl_core.rollout.app import build_app

        self._drained = asyncio.Event()
        self._drained.set()
        await self._timed("launch", "launch_timeout_s", self._engine_load())
        sock = bind_socket(self.config.host, self.config.port)
        app = build_app(self)
        await self._add_routes(app)
        uv_config = uvicorn.Config(
            app, log_level="warning", lifespan="off", access_log=False, timeout_keep_alive=SERVER_KEEP_ALIVE_S
        )
        self._http = uvicorn.Server(uv_config)
        self._serve_task = asyncio.create_task(self._http.serve(sockets=[sock]))
        while not self._http.started:
            if self._serve_task.done():
                raise EngineError(f"uvicorn stopped during start-up: {self._serve_task.exception()!r}")
            await asyncio.sleep(0.005)
        host, port = sock.getsockname()[:2]
        self._address = f"http://{advertised_host(host)}:{port}"
        self._state = ServerState.READY
        return self._address

    async def _generate_impl(self, request: GenerateRequest | Mapping[str, Any]) -> GenerateResponse:
        start = time.perf_counter()
        try:
            response = await self._generate_checked(request)
        except RolloutError as e:
            self.metrics.count(f"generate_errors_{e.status_code}")
            raise
        self.metrics.observe_latency(time.perf_counter() - start)
        self.metrics.count("generate_" + response.finish_reason)
        return response

    async def _generate_checked(self, request: GenerateRequest | Mapping[str, Any]) -> GenerateResponse:
        request = self._validated(self.request_model, request)
        self._admit()
        limit = getattr(self.config, "max_prompt_len", None)  # LLM configs (`RolloutConfig`) only
        if request.prompt_ids is not None and limit is not None and len(request.prompt_ids) > limit:
            raise BadRequestError(
                f"prompt of {len(request.prompt_ids)} tokens exceeds rollout.max_prompt_len={limit}", field="prompt_ids"
            )
        request_id = request.request_id or uuid.uuid4().hex
        params = self._validate_sampling_params(dict(request.sampling_params))
        timeout = min(request.timeout_s or self.config.request_timeout_s, self.config.request_timeout_s)
        version = self._weight_version
        start = time.perf_counter()
        fields = await self._serve("generate", request_id, self._engine_generate(request_id, request, params), timeout)
        return self.response_model(
            request_id=request_id, weight_version=version, latency_s=time.perf_counter() - start, **fields
        )

    async def _chat_impl(self, request: ChatCompletionRequest | Mapping[str, Any]) -> ChatCompletion:
        try:
            request = self._validated(ChatCompletionRequest, request)
            self._admit()
            inputs = await asyncio.to_thread(chat_inputs, request)  # image decoding stays off the server loop
            params = self._validate_sampling_params(request.sampling_overrides())
            request_id = request.request_id or f"chatcmpl-{uuid.uuid4().hex}"
            coro = self._engine_chat(request_id, request, inputs, params)
            answer = await self._serve("chat", request_id, coro, self.config.request_timeout_s)
        except RolloutError as e:
            self.metrics.count(f"chat_errors_{e.status_code}")
            raise
        self.metrics.count("chat_completions")
        return answer

    def _validated(self, model: type[R], request: R | Mapping[str, Any]) -> R:
        """`request` as a `model`, validating a mapping; errors name the field."""
        if isinstance(request, model):
            return request
        try:
            return model.model_validate(request)
        except ValidationError as e:
            message, field = validation_message(e)
            raise BadRequestError(message, field=field) from None

    def _admit(self) -> None:
        """Refuse a new request while asleep, not ready, or at `rollout.max_concurrent_requests`."""
        if self._asleep:
            raise NotReadyError("server is asleep; call wake_up() before generate")
        ready, why = self.readiness()
        if not ready:
            raise NotReadyError(why)
        if len(self._inflight) >= self.config.max_concurrent_requests:
            raise NotReadyError(f"server at capacity ({self.config.max_concurrent_requests} requests in flight)")

    async def _serve(self, op: str, request_id: str, work: Awaitable[T], timeout: float) -> T:
        """Run one request's engine work as in-flight `request_id` within `timeout`; abort it in the engine on timeout.

        Raises:
            ConflictError: `request_id` is already in flight.
            EngineTimeoutError: no answer within `timeout` (`rollout.request_timeout_s`).
        """
        if request_id in self._inflight:
            if asyncio.iscoroutine(work):
                work.close()
            raise ConflictError(f"request_id {request_id!r} is already in flight", field="request_id")
        self._inflight[request_id] = asyncio.current_task()  # type: ignore[assignment]
        self._drained.clear()
        try:
            return await self._timed(op, "request_timeout_s", work, timeout)
        except EngineTimeoutError:
            with best_effort(logger, f"aborting timed-out request {request_id}"):  # stop the engine working on it
                await asyncio.wait_for(self._engine_abort([request_id]), 1.0)
            raise
        finally:
            self._inflight.pop(request_id, None)
            if not self._inflight:
                self._drained.set()

    async def _abort_impl(self, request_ids: list[str] | None) -> list[str]:
        ids = list(self._inflight) if request_ids is None else [i for i in request_ids if i in self._inflight]
        if ids:
            await self._timed("abort", "lifecycle_timeout_s", self._engine_abort(ids))
            self.metrics.count("aborted", len(ids))
        return ids

    @contextlib.asynccontextmanager
    async def _exclusive_op(self, op: str) -> AsyncIterator[None]:
        if self._state not in (ServerState.READY, ServerState.SLEEPING):
            raise NotReadyError(f"{op} needs a launched server; it is {self._state.value}")
        if self._exclusive:
            raise ConflictError(f"{op} refused: {self._exclusive} is running")
        self._exclusive = op
        try:
            limit = self.config.lifecycle_timeout_s
            try:
                await asyncio.wait_for(self._drained.wait(), limit)
            except asyncio.TimeoutError:
                raise EngineTimeoutError(
                    f"{op}: {len(self._inflight)} requests still in flight after {limit:g} s "
                    "(rollout.lifecycle_timeout_s); abort them first"
                ) from None
            yield
        finally:
            self._exclusive = None

    async def _sleep_impl(self, level: int) -> ServerState:
        if level not in (1, 2):
            raise BadRequestError(f"sleep level must be 1 or 2, got {level!r}", field="level")
        async with self._exclusive_op("sleep"):
            if not self._asleep:
                await self._timed("sleep", "lifecycle_timeout_s", self._engine_sleep(level))
                self._asleep = {"weights", "kv_cache"}
                self._state = ServerState.SLEEPING
                self.metrics.count("sleeps")
        return self._state

    async def _wake_impl(self, tags: list[str] | None) -> ServerState:
        wanted = ["weights", "kv_cache"] if tags is None else list(tags)
        bad = [t for t in wanted if t not in ("weights", "kv_cache")]
        if bad:
            raise BadRequestError(f"unknown wake_up tag {bad[0]!r}; allowed: 'weights', 'kv_cache'", field="tags")
        if self._state is ServerState.READY and not self._asleep:
            return self._state  # awake already: do not block generates while in-flight ones drain
        async with self._exclusive_op("wake_up"):
            todo = [t for t in wanted if t in self._asleep]
            if todo:
                await self._timed("wake_up", "lifecycle_timeout_s", self._engine_wake_up(todo))
                self._asleep -= set(todo)
            if not self._asleep:
                self._state = ServerState.READY
        return self._state

    async def _shutdown_impl(self) -> None:
        if self._inflight:  # let in-flight generates finish as "abort", then cancel what is left
            with best_effort(logger, "aborting in-flight requests at shutdown"):
                await asyncio.wait_for(self._engine_abort(list(self._inflight)), 2.0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._drained.wait(), 5.0)
            for task in list(self._inflight.values()):
                task.cancel()
        if self._http is not None:
            self._http.should_exit = True
        if self._serve_task is not None:
            with best_effort(logger, "stopping the HTTP server", Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._serve_task, 10)
        if self._state not in (ServerState.CREATED, ServerState.STOPPED):
            with best_effort(logger, f"rollout server {self.rank}: engine shutdown", level=logging.WARNING):
                await self._timed("shutdown", "lifecycle_timeout_s", self._engine_shutdown())
        self.handoff_files.close()
        self.weight_segments.close()
        self.cuda_ipc_mappings.close()
        self._state = ServerState.STOPPED
