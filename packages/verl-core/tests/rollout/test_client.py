"""`verl_core.rollout.client`: HTTP error bodies mapped back to the server's `RolloutError` types."""

from __future__ import annotations

import httpx
import pytest

from verl_core.rollout.client import _error_from
from verl_core.rollout.errors import NotReadyError, RolloutError


@pytest.mark.parametrize(
    ("response", "cls", "needle"),
    [
        pytest.param(
            httpx.Response(503, json={"error": {"type": "NotReadyError", "message": "asleep", "field": None}}),
            NotReadyError,
            "asleep",
            id="server-error-body",
        ),
        pytest.param(httpx.Response(502, json=["bad gateway"]), RolloutError, "HTTP 502", id="json-list-body"),
        pytest.param(httpx.Response(404, json={"detail": "Not Found"}), RolloutError, "HTTP 404", id="no-error-key"),
        pytest.param(httpx.Response(500, text="oops"), RolloutError, "HTTP 500: oops", id="not-json"),
    ],
)
def test_error_from_maps_any_body_to_a_rollout_error(response, cls, needle):
    error = _error_from(response)
    assert type(error) is cls and needle in error.message and error.status_code == response.status_code


def test_clients_share_one_ssl_context(monkeypatch):
    """Building httpx's verifying context loads the CA bundle (~20 ms): once per process, not once per client."""
    import asyncio
    import ssl

    from verl_core.rollout import client as client_module

    built = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: built.append(1) or real(*a, **k))
    client_module._default_ssl_context.cache_clear()
    clients = [client_module.RolloutClient(f"http://127.0.0.1:{8000 + i}") for i in range(3)]
    assert len(built) == 1
    client_module._default_ssl_context.cache_clear()

    async def close() -> None:
        await asyncio.gather(*(c.aclose() for c in clients))

    asyncio.run(close())
