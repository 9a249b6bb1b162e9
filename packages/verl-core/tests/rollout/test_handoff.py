"""Tests for `verl_core.rollout.handoff`: binary generate answers through a same-host tmpfs file (opt-in)."""

from __future__ import annotations

import gc
import os
import stat
import time

import httpx
import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.errors import BadResponseError, EngineError
from verl_core.rollout.framing import FRAME_LEN
from verl_core.rollout.handoff import (
    HANDOFF_CONTENT_TYPE,
    HANDOFF_HEADER,
    PREFIX,
    HandoffFiles,
    claim_handoff,
    handoff_dir,
    is_loopback,
)
from verl_core.rollout.hf import HFHttpServer
from verl_core.rollout.replica import RolloutReplica
from verl_core.rollout.tensor_payload import plan_tensor_body
from verl_core.testing.server_contract import canonical, run

from .test_tensor_payload import REQUEST, TensorEchoServer


@pytest.fixture(scope="module")
def echo_server():
    server = TensorEchoServer(RolloutConfig(model={"path": "unused"}, max_response_bytes=1 << 16))
    run(server.launch())
    yield server
    run(server.shutdown())


@pytest.fixture
def written(echo_server, monkeypatch):
    """The paths the server writes hand-off files to (the real write, recorded)."""
    paths: list[str] = []
    real = echo_server.handoff_files.write

    def spy(body):
        meta = real(body)
        paths.append(meta["path"])
        return meta

    monkeypatch.setattr(echo_server.handoff_files, "write", spy)
    return paths


async def _generate(address: str, request: dict, **kwargs) -> dict:
    client = RolloutClient(address, **kwargs)
    try:
        return await client.generate(request)
    finally:
        await client.aclose()


def _both(address: str, request: dict) -> tuple[dict, dict]:
    async def go():
        return await _generate(address, request), await _generate(address, request, file_handoff=True)

    return run(go())


def _volatile_free(out: dict) -> dict:
    return canonical({k: v for k, v in out.items() if k not in ("request_id", "latency_s")})


def test_handoff_decodes_bit_exact_like_the_http_body_and_leaves_no_file(echo_server, written):
    over_http, via_file = _both(echo_server.address, REQUEST)
    assert len(written) == 1 and os.path.dirname(written[0]) == handoff_dir()
    assert os.path.basename(written[0]).startswith(PREFIX)
    assert _volatile_free(via_file) == _volatile_free(over_http)
    assert via_file["rows"]["latents"].shape == (3, 3, 4)
    assert not os.path.exists(written[0])  # the client unlinked it
    assert echo_server.handoff_files.sweep() == [] and echo_server.handoff_files.pending() == []


def test_handoff_header_leaves_json_answers_json(echo_server, written):
    request = {**REQUEST, "prompt": "json only"}
    over_http, via_file = _both(echo_server.address, request)
    assert written == [] and _volatile_free(via_file) == _volatile_free(over_http)
    with httpx.Client(base_url=echo_server.address, trust_env=False, timeout=30) as http:
        answer = http.post("/generate", json=request, headers={HANDOFF_HEADER: "file"})
    assert answer.headers["content-type"].startswith("application/json")


def test_server_answers_only_after_the_file_is_complete(echo_server, monkeypatch):
    real = echo_server.handoff_files.write

    def slow(body):  # a write that takes a while: the answer must wait for it
        time.sleep(0.3)
        return real(body)

    monkeypatch.setattr(echo_server.handoff_files, "write", slow)
    over_http, via_file = _both(echo_server.address, REQUEST)
    assert _volatile_free(via_file) == _volatile_free(over_http)


def test_missing_file_names_the_path(echo_server, monkeypatch):
    real = echo_server.handoff_files.write

    def elsewhere(body):  # as if the server wrote it on another host
        meta = real(body)
        os.unlink(meta["path"])
        return meta

    monkeypatch.setattr(echo_server.handoff_files, "write", elsewhere)
    missing = rf"{PREFIX}[0-9]+-[0-9]+-[0-9a-f]{{32}} does not exist: is the rollout server on another"
    with pytest.raises(BadResponseError, match=missing):
        run(_generate(echo_server.address, REQUEST, file_handoff=True))


def _file(tmp_path, data: bytes) -> str:
    path = str(tmp_path / f"{PREFIX}test")
    with open(path, "wb") as f:
        f.write(data)
    return path


@pytest.mark.parametrize(
    ("data", "size", "needle"),
    [
        pytest.param(FRAME_LEN.pack(5) + b"{{{{{" + bytes(51), 64, "header", id="garbage"),
        pytest.param(b"\x00" * 64, 65, "has 64 bytes, the server announced 65", id="wrong-size"),
    ],
)
def test_client_unlinks_the_file_even_when_decoding_fails(tmp_path, data, size, needle):
    path = _file(tmp_path, data)
    with pytest.raises(BadResponseError, match=needle):
        claim_handoff({"path": path, "size": size})
    assert not os.path.exists(path)


def test_claim_refuses_a_malformed_answer_or_a_foreign_file(tmp_path):
    with pytest.raises(BadResponseError, match='"path": str, "size": int'):
        claim_handoff({"path": 3})
    other = tmp_path / "precious"
    other.write_bytes(b"x")
    with pytest.raises(BadResponseError, match=f"not a {PREFIX}"):
        claim_handoff({"path": str(other), "size": 1})
    assert other.exists()


def test_files_are_private_and_unclaimed_ones_are_swept_after_the_grace_period(tmp_path):
    files = HandoffFiles(grace_s=10.0, directory=str(tmp_path))
    body = plan_tensor_body({"x": torch.arange(6.0)})
    kept, claimed = files.write(body), files.write(body)
    assert stat.S_IMODE(os.stat(kept["path"]).st_mode) == 0o600
    assert os.path.getsize(kept["path"]) == kept["size"] == body.size
    with open(kept["path"], "rb") as f:
        assert f.read() == bytes(body.encode())  # exactly the streamed bytes
    assert torch.equal(claim_handoff(claimed)["x"], torch.arange(6.0))
    assert files.sweep() == [] and files.pending() == [kept["path"]]  # claimed: forgotten; the other: in grace
    assert files.sweep(now=time.monotonic() + 11) == [kept["path"]]
    assert not os.path.exists(kept["path"]) and files.pending() == []
    left = files.write(body)
    files.close()
    assert not os.path.exists(left["path"]) and os.listdir(tmp_path) == []
    with pytest.raises(EngineError, match="shut down while writing"):  # a write that ends after the shutdown
        files.write(body)
    assert os.listdir(tmp_path) == []


def test_server_shutdown_removes_unclaimed_files():
    server = TensorEchoServer(RolloutConfig(model={"path": "unused"}))
    run(server.launch())
    try:
        with httpx.Client(base_url=server.address, trust_env=False, timeout=30) as http:
            answer = http.post("/generate", json=REQUEST, headers={HANDOFF_HEADER: "file"})
        assert answer.headers["content-type"] == HANDOFF_CONTENT_TYPE
        path = answer.json()["path"]
        assert os.path.getsize(path) == answer.json()["size"]
        assert server.handoff_files.grace_s == server.config.request_timeout_s + 60
    finally:
        run(server.shutdown())
    assert not os.path.exists(path)


def test_handoff_matches_http_for_the_hf_backend(tiny_llm_path):
    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"))
    run(server.launch())
    try:
        request = {"prompt": "the man said that", "sampling_params": {"max_tokens": 4, "temperature": 0.0}}
        over_http, via_file = _both(server.address, request)
    finally:
        run(server.shutdown())
    assert over_http["token_ids"] and _volatile_free(via_file) == _volatile_free(over_http)


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("http://127.0.0.1:8000", True),
        ("http://localhost:1", True),
        ("http://[::1]:9", True),
        ("127.0.0.1", True),
        ("http://10.0.0.5:8000", False),
        ("http://0.0.0.0:8000", False),
    ],
)
def test_is_loopback(address, expected):
    assert is_loopback(address) is expected


@pytest.mark.parametrize("file_handoff", [True, False])
def test_replica_asks_for_the_handoff_only_from_loopback_servers(file_handoff):
    replica = RolloutReplica(RolloutConfig(model={"path": "unused"}), file_handoff=file_handoff)
    local, remote = replica._client(0, "http://127.0.0.1:8000"), replica._client(1, "http://10.0.0.5:8000")
    try:
        assert (local.file_handoff, remote.file_handoff) == (file_handoff, False)
        assert remote.max_response_bytes == replica.config.max_response_bytes and remote.rank == 1
    finally:
        run(local.aclose())
        run(remote.aclose())


def _mapping_of(address: int) -> str:
    """The /proc/self/maps path of the mapping holding `address` ('' for anonymous memory)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return fields[5].strip() if len(fields) > 5 else ""
    return ""


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux /proc")
def test_claim_decodes_in_place_from_a_private_mapping_that_outlives_the_file(tmp_path):
    files = HandoffFiles(grace_s=10.0, directory=str(tmp_path))
    sent = {"x": torch.arange(4096.0), "y": torch.ones(3, 5, dtype=torch.int64)}
    meta = files.write(plan_tensor_body(sent))
    got = claim_handoff(meta)
    assert not os.path.exists(meta["path"])  # unlinked at once; the tensors keep the pages
    assert os.path.basename(meta["path"]) in _mapping_of(got["x"].data_ptr())  # no copy: viewed in the file's pages
    gc.collect()
    assert torch.equal(got["x"], sent["x"]) and torch.equal(got["y"], sent["y"])
    got["x"][0] = -1.0  # writable, copy-on-write: the mapping is private
    assert got["x"][0] == -1.0
