"""`RolloutClient`: async HTTP client of one rollout server, every call bounded by a timeout."""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import httpx
import torch

from verl_core.rollout import errors
from verl_core.rollout.errors import BadResponseError, EngineTimeoutError, RolloutError, ServerDeadError
from verl_core.rollout.handoff import HANDOFF_CONTENT_TYPE, HANDOFF_HEADER, claim_handoff
from verl_core.rollout.net import CLIENT_KEEP_ALIVE_S
from verl_core.rollout.tensor_payload import TENSOR_CONTENT_TYPE, decode_tensor_stream
from verl_core.rollout.weights import WeightKind, encode_weight_stream

__all__ = ["RolloutClient"]

_ERRORS: dict[str, type[RolloutError]] = {
    name: getattr(errors, name) for name in errors.__all__ if name not in ("ServerDeadError",)
}


class RolloutClient:
    """Talk to one `RolloutHttpServer` over HTTP; errors come back as the server's `RolloutError` types.

    Args:
        address (`str`): base URL, e.g. `http://127.0.0.1:8000`.
        timeout_s (`float`, *optional*, defaults to `120.0`): timeout of every call (generate adds the request's).
        weight_timeout_s (`float`, *optional*, defaults to `600.0`): timeout of `update_weights`.
        rank (`int`, *optional*, defaults to `0`): the server's rank, named in `ServerDeadError`.
        max_response_bytes (`int`, *optional*, defaults to 2 GiB): largest tensor data a binary generate answer
            may announce (a larger one raises `PayloadTooLargeError` before it is read).
        file_handoff (`bool`, *optional*, defaults to `False`): ask the server to hand binary generate answers over
            through a tmpfs file instead of the HTTP body (`verl_core.rollout.handoff`); only for a server on this
            host (a missing file raises `BadResponseError` naming it).
    """

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 120.0,
        weight_timeout_s: float = 600.0,
        rank: int = 0,
        max_response_bytes: int = 2 << 30,
        file_handoff: bool = False,
    ):
        self.address = address.rstrip("/")
        self.rank = rank
        self.timeout_s = timeout_s
        self.weight_timeout_s = weight_timeout_s
        self.max_response_bytes = max_response_bytes
        self.file_handoff = file_handoff
        self._http = httpx.AsyncClient(
            base_url=self.address,
            timeout=timeout_s,
            trust_env=False,
            verify=_default_ssl_context(),
            limits=httpx.Limits(keepalive_expiry=CLIENT_KEEP_ALIVE_S),
        )

    async def generate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """POST /generate; returns the response fields.

        A binary answer (`verl_core.rollout.tensor_payload`) is decoded as it streams in: fields holding tensors
        or TensorDicts come back as those objects (CPU, dtypes and shapes exact); JSON answers as parsed JSON.
        """
        extra = float(request.get("timeout_s") or 0)
        headers = {HANDOFF_HEADER: "file"} if self.file_handoff else None
        return await self._post("/generate", json=dict(request), headers=headers, timeout=self.timeout_s + extra)

    async def chat(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST /v1/chat/completions with an OpenAI chat request body; returns the answer as parsed JSON.

        Bounded by `timeout_s`; the server's own errors come back as its `RolloutError` types (422 naming the field,
        504 for a hung engine), an unreachable server as `ServerDeadError`.
        """
        return await self._post("/v1/chat/completions", json=dict(body))

    async def abort(self, request_ids: list[str] | None = None) -> list[str]:
        """POST /abort; returns the ids that were in flight."""
        return (await self._post("/abort", json={"request_ids": request_ids}))["aborted"]

    async def sleep(self, level: int | None = None) -> dict[str, Any]:
        """POST /sleep."""
        return await self._post("/sleep", json={"level": level})

    async def wake_up(self, tags: list[str] | None = None) -> dict[str, Any]:
        """POST /wake_up."""
        return await self._post("/wake_up", json={"tags": tags})

    async def update_weights(
        self,
        weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
        *,
        version: int,
        kind: WeightKind = "full",
        peft_config: dict[str, Any] | None = None,
        bucket_bytes: int = 256 << 20,
    ) -> dict[str, Any]:
        """Stream weights to POST /update_weights in buckets of `bucket_bytes` (see `verl_core.rollout.weights`)."""
        stream = encode_weight_stream(
            weights, version=version, kind=kind, peft_config=peft_config, bucket_bytes=bucket_bytes
        )
        return await self._post(
            "/update_weights",
            content=_aiter(stream),
            headers={"content-type": "application/octet-stream"},
            timeout=self.weight_timeout_s,
        )

    async def update_weights_shm(
        self,
        segment: Mapping[str, Any],
        *,
        version: int,
        kind: WeightKind = "full",
        peft_config: dict[str, Any] | None = None,
        bucket_bytes: int | None = None,
    ) -> dict[str, Any]:
        """POST /update_weights_shm: load the weights a `WeightSegment.write` descriptor names (same host only).

        Do not write the segment again before this call returns (`verl_core.rollout.shm_weights`).
        """
        update = {"version": version, "kind": kind, "peft_config": peft_config, "bucket_bytes": bucket_bytes}
        return await self._post_descriptor("/update_weights_shm", {"segment": dict(segment), **update})

    async def update_weights_cuda_ipc(
        self,
        descriptor: Mapping[str, Any],
        *,
        version: int,
        kind: WeightKind = "full",
        peft_config: dict[str, Any] | None = None,
        bucket_bytes: int | None = None,
    ) -> dict[str, Any]:
        """POST /update_weights_cuda_ipc: load the GPU tensors a `share_cuda` descriptor names (same host only).

        Keep the shared tensors alive and unwritten until this call returns (`verl_core.rollout.cuda_ipc_weights`).
        """
        update = {"version": version, "kind": kind, "peft_config": peft_config, "bucket_bytes": bucket_bytes}
        return await self._post_descriptor("/update_weights_cuda_ipc", {"cuda_ipc": dict(descriptor), **update})

    async def _post_descriptor(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        content = json.dumps(body, separators=(",", ":"), default=_sets_as_lists).encode()  # PEFT's target sets
        headers = {"content-type": "application/json"}
        return await self._post(route, content=content, headers=headers, timeout=self.weight_timeout_s)

    async def health(self) -> dict[str, Any]:
        """GET /health."""
        return await self._request("GET", "/health")

    async def ready(self) -> bool:
        """GET /ready: True when the server serves generates now."""
        try:
            await self._request("GET", "/ready")
        except errors.NotReadyError:
            return False
        return True

    async def metrics(self) -> dict[str, Any]:
        """GET /metrics."""
        return await self._request("GET", "/metrics")

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _post(self, path: str, **kwargs: Any) -> dict[str, Any]:
        return await self._request("POST", path, **kwargs)

    async def _request(self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any) -> Any:
        limit = timeout or self.timeout_s
        try:  # httpx timeouts are per read/write; wait_for bounds the whole call, reading the body included
            return await asyncio.wait_for(self._send(method, path, limit, **kwargs), limit)
        except RolloutError as e:  # the server's own error (an EngineTimeoutError is a TimeoutError too)
            if isinstance(e, BadResponseError) and isinstance(e.__cause__, httpx.TransportError):
                raise self._dead(e.__cause__) from e  # the connection broke mid-body
            raise
        except (httpx.TimeoutException, asyncio.TimeoutError) as e:
            raise EngineTimeoutError(f"{method} {self.address}{path}: no answer within {limit:g} s") from e
        except httpx.TransportError as e:
            raise self._dead(e) from e

    async def _send(self, method: str, path: str, limit: float, **kwargs: Any) -> Any:
        request = self._http.build_request(method, path, timeout=limit, **kwargs)
        response = await self._http.send(request, stream=True)
        try:
            if response.status_code >= 400:
                await response.aread()
                raise _error_from(response)
            content_type = response.headers.get("content-type", "").split(";")[0].strip()
            if content_type == TENSOR_CONTENT_TYPE:
                return await decode_tensor_stream(response.aiter_bytes(), max_bytes=self.max_response_bytes)
            await response.aread()
            if content_type == HANDOFF_CONTENT_TYPE:  # a same-host tmpfs file holds the binary body
                return await asyncio.to_thread(claim_handoff, response.json(), max_bytes=self.max_response_bytes)
            return response.json()
        finally:
            await response.aclose()

    def _dead(self, e: BaseException) -> ServerDeadError:
        return ServerDeadError(
            f"rollout server rank {self.rank} at {self.address} is unreachable: {type(e).__name__}: {e}",
            rank=self.rank,
        )


def _error_from(response: httpx.Response) -> RolloutError:
    try:
        payload = response.json()
    except ValueError:
        payload = None
    body = (payload.get("error") if isinstance(payload, dict) else None) or {}
    if not isinstance(body, dict):
        body = {"message": str(body)}
    cls = _ERRORS.get(body.get("type", ""), RolloutError)
    error = cls(body.get("message") or f"HTTP {response.status_code}: {response.text[:200]}", field=body.get("field"))
    error.status_code = response.status_code
    return error


def _sets_as_lists(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot send {type(value).__name__} {value!r:.80} as JSON")


async def _aiter(chunks: Iterator[bytes | memoryview]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk  # type: ignore[misc]


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    """The default verifying context of httpx, built once per process: building it loads the CA bundle (~20 ms)."""
    return httpx.create_ssl_context(trust_env=False)
