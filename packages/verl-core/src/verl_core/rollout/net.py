"""HTTP plumbing shared by the routes: socket binding, bounded body reads, validation messages."""

from __future__ import annotations

import socket
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from verl_core.rollout.errors import BadRequestError, PayloadTooLargeError

__all__ = [
    "CLIENT_KEEP_ALIVE_S",
    "SERVER_KEEP_ALIVE_S",
    "advertised_host",
    "bind_socket",
    "parse_json",
    "read_body",
    "validation_message",
]

CLIENT_KEEP_ALIVE_S = 15.0
"""How long a client keeps an idle connection for reuse; well below `SERVER_KEEP_ALIVE_S`."""
SERVER_KEEP_ALIVE_S = 75
"""How long a server keeps an idle connection open. With both at the libraries' 5 s default, a client could send a
request on a connection the server was closing at that moment: the request failed with `ReadError` and the server
looked dead (seen on vLLM-Omni between a training step and validation)."""

M = TypeVar("M", bound=BaseModel)


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind a listening TCP socket (port 0 picks a free one) so the port is known before serving.

    Raises:
        OSError: the address cannot be bound; the message names host and port.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP proto: asyncio sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(e.errno, f"cannot bind rollout server to {host}:{port} (rollout.host/port): {e.strerror}") from e
    sock.listen(2048)
    sock.setblocking(False)
    return sock


async def read_body(request: Any, limit: int) -> bytes:
    """Read a request body, refusing more than `limit` bytes (rollout.max_request_bytes) with a 413."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(
            f"request body of {declared} bytes exceeds rollout.max_request_bytes={limit}", field="body"
        )
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLargeError(f"request body exceeds rollout.max_request_bytes={limit}", field="body")
    return bytes(body)


def parse_json(model: type[M], body: bytes) -> M:
    """Validate a JSON body against `model`; errors name the field (malformed JSON: status 400)."""
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as e:
        message, field = validation_message(e)
        error = BadRequestError(message, field=field)
        if any(err["type"] == "json_invalid" for err in e.errors()):
            error.status_code = 400
        raise error from None


def validation_message(error: ValidationError, prefix: str = "") -> tuple[str, str | None]:
    """One readable line per pydantic error, naming the dotted field; returns (message, first field)."""
    lines, first = [], None
    for err in error.errors()[:5]:
        field = ".".join([prefix] * bool(prefix) + [str(p) for p in err["loc"]]) or None
        first = first or field
        if err["type"] == "extra_forbidden":
            lines.append(f"unknown field `{field}`")
        elif err["type"] == "json_invalid":
            lines.append(f"malformed JSON: {err['msg']}")
        elif field:
            lines.append(f"field `{field}`: {err['msg']} (got {err.get('input')!r:.80})")
        else:
            lines.append(err["msg"])
    return "; ".join(lines), first


def advertised_host(bound: str) -> str:
    """The host clients should dial: the bound address, or this node's address for a wildcard bind."""
    if bound not in ("0.0.0.0", "::"):
        return bound
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
