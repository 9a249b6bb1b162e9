"""Lifecycle faults of `RolloutHttpServer` (through `HFHttpServer`): failed launch, busy port, hung engine at exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from verl_core.config import RolloutConfig
from verl_core.rollout.errors import ConflictError, EngineError, NotReadyError
from verl_core.rollout.hf import HFHttpServer
from verl_core.rollout.net import bind_socket
from verl_core.rollout.server import ServerState
from verl_core.testing.server_contract import run


def test_launch_with_missing_model_fails_cleanly(tmp_path):
    server = HFHttpServer(RolloutConfig(model={"path": str(tmp_path / "missing")}, device="cpu"))
    with pytest.raises(EngineError, match="engine failed during launch"):
        run(server.launch())
    assert server.state is ServerState.FAILED
    with pytest.raises(NotReadyError):
        run(server.generate({"prompt_ids": [1]}))
    with pytest.raises(ConflictError, match="already called"):
        run(server.launch())


def test_launch_on_a_busy_port_names_host_and_port(tiny_llm_path):
    busy = bind_socket("127.0.0.1", 0)
    port = busy.getsockname()[1]
    try:
        server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu", port=port))
        with pytest.raises(OSError, match=f"127.0.0.1:{port}"):
            run(server.launch())
        assert server.state is ServerState.FAILED
    finally:
        busy.close()


@pytest.mark.slow
def test_hung_engine_thread_does_not_keep_the_process_alive(tiny_llm_path):
    script = textwrap.dedent(
        f"""
        import asyncio, threading
        from verl_core.config import RolloutConfig
        from verl_core.rollout.errors import EngineTimeoutError
        from verl_core.rollout.hf import HFHttpServer

        class Hung(HFHttpServer):
            async def _engine_generate(self, request_id, request, params):
                return await self._run_blocking(threading.Event().wait)  # never returns

        async def main():
            server = Hung(RolloutConfig(model={{"path": {str(tiny_llm_path)!r}}}, device="cpu", request_timeout_s=0.2))
            await server.launch()
            try:
                await server.generate({{"prompt_ids": [1, 2]}})
            except EngineTimeoutError:
                print("timed out")
            await server.shutdown()

        asyncio.run(main())
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "timed out" in out.stdout


def test_shutdown_aborts_in_flight_generates(tiny_llm_path):
    import asyncio

    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"))
    run(server.launch())

    async def scenario():
        long = {"prompt_ids": [4, 5], "sampling_params": {"max_tokens": 500, "ignore_eos": True}}
        task = asyncio.ensure_future(server.generate(long))
        while not server._inflight:
            await asyncio.sleep(0.002)
        await server.shutdown()
        return await task

    response = run(scenario())
    assert response.finish_reason == "abort" and server.state is ServerState.STOPPED


def test_shutdown_logs_why_the_engine_failed_to_stop(tiny_llm_path, caplog):
    import logging

    class Stuck(HFHttpServer):
        async def _engine_shutdown(self):
            raise RuntimeError("engine refused to stop")

    server = Stuck(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"))
    run(server.launch())
    with caplog.at_level(logging.WARNING, logger="verl_core.rollout.server"):
        run(server.shutdown())
    assert server.state is ServerState.STOPPED
    assert (
        "engine shutdown failed: EngineError: engine failed during shutdown: RuntimeError: engine refused to stop"
        in (caplog.text)
    )


def test_idle_client_connection_outlives_uvicorn_default_keep_alive(tiny_llm_path):
    """A pooled connection idle past uvicorn's 5 s default is still open: reusing it cannot race the server's close.

    (Both sides at 5 s made a request sent at that moment fail with `ReadError`: the server looked dead.)
    """
    import asyncio

    from verl_core.rollout.client import RolloutClient
    from verl_core.rollout.net import CLIENT_KEEP_ALIVE_S, SERVER_KEEP_ALIVE_S

    assert CLIENT_KEEP_ALIVE_S < SERVER_KEEP_ALIVE_S
    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"))
    run(server.launch())

    async def scenario():
        client = RolloutClient(server.address)
        try:
            await client.generate({"prompt_ids": [4, 5], "sampling_params": {"max_tokens": 1}})
            await asyncio.sleep(5.5)
            pool = client._http._transport._pool
            return [c for c in pool.connections if not c.has_expired()]
        finally:
            await client.aclose()

    try:
        assert run(scenario()), "the server closed the idle connection; the next request could race its close"
    finally:
        run(server.shutdown())
