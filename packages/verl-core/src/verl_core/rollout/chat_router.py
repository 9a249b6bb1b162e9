"""`ChatRouterServer`: one OpenAI-compatible address in front of a replica's servers (least-outstanding routing).

Reward functions written for verl (`compute_score(..., reward_router_address=...)`) POST OpenAI chat requests to a
single `host:port`. This small HTTP proxy gives them that address: `POST /v1/chat/completions` is forwarded to the
live server with the fewest requests in flight (`RolloutRouter.chat`; a server that stops answering is marked dead
and skipped, its rank kept), and the server's answer, or its error with the same status and JSON error body, comes
back unchanged. `GET /health` lists the live and dead ranks. The proxy runs on the event loop of the caller that
owns the replica; it never waits longer than the servers' clients do (`rollout.request_timeout_s`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from verl_core.rollout.errors import BadRequestError, EngineError, RolloutError
from verl_core.rollout.net import advertised_host, bind_socket, read_body
from verl_core.rollout.replica import RolloutRouter

__all__ = ["SERVER_RANK_HEADER", "ChatRouterServer"]

logger = logging.getLogger(__name__)

SERVER_RANK_HEADER = "x-verl-server-rank"
"""Response header naming the rank of the server that answered a forwarded chat request."""


class ChatRouterServer:
    """Serve `POST /v1/chat/completions` on one address and spread the requests over a `RolloutRouter`'s servers.

    Args:
        router (`RolloutRouter`): the replica's router (its clients carry the per-request timeout).
        host (`str`, *optional*, defaults to `"127.0.0.1"`): bind address.
        port (`int`, *optional*, defaults to `0`): bind port; 0 picks a free one.
        max_request_bytes (`int`, *optional*, defaults to 64 MiB): largest request body (images are inline).
    """

    def __init__(
        self, router: RolloutRouter, *, host: str = "127.0.0.1", port: int = 0, max_request_bytes: int = 64 << 20
    ) -> None:
        self.router = router
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.forwarded = 0
        self._http: Any = None
        self._task: asyncio.Task[Any] | None = None
        self._address = ""

    @property
    def address(self) -> str:
        """`host:port` of the proxy (the form verl's `reward_router_address` takes); empty before `start`."""
        return self._address

    def build_app(self) -> FastAPI:
        """The FastAPI app: `/v1/chat/completions`, `/health`."""
        app = FastAPI(title="verl chat router", docs_url=None, redoc_url=None)

        @app.exception_handler(RolloutError)
        async def _rollout_error(_: Request, exc: RolloutError) -> JSONResponse:
            return JSONResponse(exc.to_json(), status_code=exc.status_code)

        @app.get("/health")
        async def health() -> dict[str, Any]:
            return {
                "live_ranks": self.router.live_ranks,
                "dead_ranks": {str(r): why for r, why in sorted(self.router.dead.items())},
                "outstanding": {str(r): n for r, n in self.router.outstanding.items()},
            }

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            raw = await read_body(request, self.max_request_bytes)
            try:
                body = json.loads(raw or b"{}")
            except ValueError as e:
                error = BadRequestError(f"the body is not JSON: {e}", field="body")
                error.status_code = 400
                raise error from None
            if not isinstance(body, dict):
                raise BadRequestError(f"expected a JSON object, got {type(body).__name__}", field="body")
            rank, answer = await self.router.chat(body)
            self.forwarded += 1
            return JSONResponse(answer, headers={SERVER_RANK_HEADER: str(rank)})

        return app

    async def start(self) -> str:
        """Bind and serve on the running event loop; return `host:port`.

        Raises:
            OSError: the address cannot be bound (names host and port).
            EngineError: uvicorn stopped during start-up.
        """
        import uvicorn

        sock = bind_socket(self.host, self.port)
        config = uvicorn.Config(self.build_app(), log_level="warning", lifespan="off", access_log=False)
        self._http = uvicorn.Server(config)
        self._task = asyncio.create_task(self._http.serve(sockets=[sock]))
        while not self._http.started:
            if self._task.done():
                raise EngineError(f"chat router: uvicorn stopped during start-up: {self._task.exception()!r}")
            await asyncio.sleep(0.005)
        host, port = sock.getsockname()[:2]
        self._address = f"{advertised_host(host)}:{port}"
        return self._address

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving (safe to call twice)."""
        if self._http is None or self._task is None:
            return
        self._http.should_exit = True
        try:
            await asyncio.wait_for(self._task, timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError) as e:
            logger.info("chat router stop: %r", e)
        self._http, self._task = None, None
