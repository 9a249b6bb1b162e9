"""The FastAPI routes of `verl_core.rollout.app` against a real `HFHttpServer`: faults of the upload route."""

from __future__ import annotations

import socket
import urllib.parse

from verl_core.config import RolloutConfig
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.server_contract import run


def _read_response(sock: socket.socket, needle: bytes) -> bytes:
    data = b""
    while needle not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_update_weights_from_a_stalled_sender_fails_within_the_timeout(tiny_llm_path):
    config = RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu", weight_sync_timeout_s=0.3)
    server = HFHttpServer(config)
    run(server.launch())
    try:
        url = urllib.parse.urlparse(server.address)
        with socket.create_connection((url.hostname, url.port), timeout=5) as sock:
            head = b"POST /update_weights HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
            sock.sendall(head + b"\x10\x00\x00")  # 3 of the 8 length bytes of the begin frame, then nothing
            response = _read_response(sock, b"weight_sync_timeout_s")
        assert response.startswith(b"HTTP/1.1 422"), response[:200]
        assert b"no complete begin frame within 0.3 s (rollout.weight_sync_timeout_s)" in response
        assert server.readiness() == (True, "ready")
        assert run(server.generate({"prompt_ids": [4, 5], "sampling_params": {"max_tokens": 2}})).weight_version == 0
    finally:
        run(server.shutdown())
