"""The FastAPI app of a `RolloutHttpServer`: one route per lifecycle method, JSON errors naming the field.

`POST /generate` answers with JSON, or with a binary tensor body (`verl_core.rollout.tensor_payload`) when the
response has fields holding tensors or TensorDicts; a binary answer goes through a tmpfs file when the client asks
for it (`verl_core.rollout.handoff`). `POST /v1/chat/completions` is OpenAI's chat route (`verl_core.rollout.chat`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from tensordict import TensorDictBase

from verl_core.best_effort import best_effort
from verl_core.rollout.chat import ChatCompletionRequest
from verl_core.rollout.errors import RolloutError, WeightSyncError
from verl_core.rollout.framing import MAX_HEADER_BYTES
from verl_core.rollout.handoff import HANDOFF_CONTENT_TYPE, HANDOFF_HEADER
from verl_core.rollout.net import parse_json, read_body
from verl_core.rollout.protocol import (
    AbortRequest,
    AbortResponse,
    CudaIpcWeightUpdateRequest,
    ShmWeightUpdateRequest,
    SleepRequest,
    StateResponse,
    WakeUpRequest,
)
from verl_core.rollout.tensor_payload import TENSOR_CONTENT_TYPE, plan_tensor_body
from verl_core.rollout.weights import WeightStreamReader

if TYPE_CHECKING:
    import enum

    from openai.types.chat import ChatCompletion

    from verl_core.config.rollout import RolloutBaseConfig
    from verl_core.rollout.handoff import HandoffFiles
    from verl_core.rollout.metrics import ServerMetrics
    from verl_core.rollout.protocol import GenerateRequest, GenerateResponse, WeightUpdateResponse
    from verl_core.rollout.weights import WeightPiece, WeightUpdate

__all__ = ["AppServer", "build_app"]


M = TypeVar("M", bound=BaseModel)
logger = logging.getLogger(__name__)


class AppServer(Protocol):
    """What `build_app` calls on its server; `verl_core.rollout.server.RolloutHttpServer` provides all of it.

    Typed here so that the app sits below the server in the import graph (the server builds the app at launch).
    """

    rank: int
    config: RolloutBaseConfig
    metrics: ServerMetrics
    handoff_files: HandoffFiles
    request_model: ClassVar[type[GenerateRequest]]

    @property
    def weight_version(self) -> int:
        """The version of the served weights (`/ready`, `/sleep`, `/wake_up`)."""

    def health(self) -> dict[str, Any]:
        """`GET /health`."""

    def readiness(self) -> tuple[bool, str]:
        """`GET /ready`: ready or not, and why."""

    def metrics_snapshot(self) -> dict[str, Any]:
        """`GET /metrics`."""

    async def generate(self, request: GenerateRequest | Mapping[str, Any]) -> GenerateResponse:
        """`POST /generate`."""

    async def chat(self, request: ChatCompletionRequest | Mapping[str, Any]) -> ChatCompletion:
        """`POST /v1/chat/completions`."""

    async def abort(self, request_ids: Iterable[str] | None = None) -> list[str]:
        """`POST /abort`: the ids aborted."""

    async def sleep(self, level: int | None = None) -> enum.Enum:
        """`POST /sleep`: the new `ServerState`."""

    async def wake_up(self, tags: list[str] | None = None) -> enum.Enum:
        """`POST /wake_up`: the new `ServerState`."""

    async def _apply_update(
        self, update: WeightUpdate, buckets: AsyncIterator[list[WeightPiece]]
    ) -> WeightUpdateResponse: ...

    async def update_weights_shm(self, segment: Mapping[str, Any], **kwargs: Any) -> WeightUpdateResponse:
        """`POST /update_weights_shm`."""

    async def update_weights_cuda_ipc(self, descriptor: Mapping[str, Any], **kwargs: Any) -> WeightUpdateResponse:
        """`POST /update_weights_cuda_ipc`."""


def build_app(server: AppServer) -> FastAPI:
    """Build the app whose routes call `server`'s lifecycle methods on the server loop."""
    app = FastAPI(title=f"{type(server).__name__} rank {server.rank}", docs_url=None, redoc_url=None)
    limit = server.config.max_request_bytes

    @app.exception_handler(RolloutError)
    async def _rollout_error(_: Request, exc: RolloutError) -> JSONResponse:
        server.metrics.count(f"http_{exc.status_code}")
        return JSONResponse(exc.to_json(), status_code=exc.status_code)

    @app.get("/health")
    async def health() -> dict:
        return server.health()

    @app.get("/ready")
    async def ready() -> JSONResponse:
        ok, why = server.readiness()
        return JSONResponse({"ready": ok, "reason": why, "weight_version": server.weight_version}, 200 if ok else 503)

    @app.get("/metrics")
    async def metrics() -> dict:
        return server.metrics_snapshot()

    @app.post("/generate")
    async def generate(request: Request) -> Response:
        req = parse_json(server.request_model, await read_body(request, limit))
        out = await server.generate(req)
        binary = [name for name, value in out if isinstance(value, (torch.Tensor, TensorDictBase))]
        if not binary:
            return Response(out.model_dump_json(), media_type="application/json")
        fields = {**out.model_dump(mode="json", exclude=set(binary)), **{name: getattr(out, name) for name in binary}}
        body = plan_tensor_body(fields, max_bytes=server.config.max_response_bytes)  # every check before a byte
        if request.headers.get(HANDOFF_HEADER) == "file":  # same-host client: answer once the file is complete
            meta = await run_in_threadpool(server.handoff_files.write, body)
            return JSONResponse(meta, media_type=HANDOFF_CONTENT_TYPE)
        # streamed from the tensors' own memory in bounded chunks; starlette iterates it off the server loop
        headers = {"content-length": str(body.size)}
        return StreamingResponse(body.chunks(), media_type=TENSOR_CONTENT_TYPE, headers=headers)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        req = parse_json(ChatCompletionRequest, await read_body(request, limit))
        out = await server.chat(req)
        return Response(out.model_dump_json(exclude_unset=True), media_type="application/json")

    @app.post("/abort")
    async def abort(request: Request) -> AbortResponse:
        req = parse_json(AbortRequest, await read_body(request, limit))
        return AbortResponse(aborted=await server.abort(req.request_ids))

    @app.post("/sleep")
    async def sleep(request: Request) -> StateResponse:
        req = parse_json(SleepRequest, await read_body(request, limit))
        state = await server.sleep(req.level)
        return StateResponse(state=state.value, weight_version=server.weight_version)

    @app.post("/wake_up")
    async def wake_up(request: Request) -> StateResponse:
        req = parse_json(WakeUpRequest, await read_body(request, limit))
        state = await server.wake_up(req.tags)
        return StateResponse(state=state.value, weight_version=server.weight_version)

    @app.post("/update_weights")
    async def update_weights(request: Request) -> Response:
        chunks = request.stream().__aiter__()
        reader = WeightStreamReader(chunks, max_bucket_bytes=server.config.max_bucket_bytes)
        wait = server.config.weight_sync_timeout_s  # a stalled sender must not hold the handler forever
        try:
            try:
                update = await asyncio.wait_for(reader.begin(), wait)
            except asyncio.TimeoutError:
                message = f"no complete begin frame within {wait:g} s (rollout.weight_sync_timeout_s)"
                raise WeightSyncError(message, field="stream") from None
            out = await server._apply_update(update, reader.buckets(update))
        except RolloutError:
            with best_effort(logger, "draining the refused upload"):  # so the client reads our 4xx, not a reset
                await asyncio.wait_for(_drain(chunks), wait)
            raise
        return Response(out.model_dump_json(), media_type="application/json")

    async def descriptor_request(request: Request, model: type[M]) -> M:
        wait = server.config.weight_sync_timeout_s  # a stalled sender must not hold the handler forever
        try:
            raw = await asyncio.wait_for(read_body(request, MAX_HEADER_BYTES), wait)
        except asyncio.TimeoutError:
            raise WeightSyncError(f"no complete body within {wait:g} s (rollout.weight_sync_timeout_s)") from None
        return parse_json(model, raw)

    @app.post("/update_weights_shm")
    async def update_weights_shm(request: Request) -> Response:
        req = await descriptor_request(request, ShmWeightUpdateRequest)
        out = await server.update_weights_shm(req.segment, **req.update_kwargs())
        return Response(out.model_dump_json(), media_type="application/json")

    @app.post("/update_weights_cuda_ipc")
    async def update_weights_cuda_ipc(request: Request) -> Response:
        req = await descriptor_request(request, CudaIpcWeightUpdateRequest)
        out = await server.update_weights_cuda_ipc(req.cuda_ipc, **req.update_kwargs())
        return Response(out.model_dump_json(), media_type="application/json")

    return app


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    async for _ in chunks:
        pass
