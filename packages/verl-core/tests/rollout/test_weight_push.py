"""`WeightPusher` against a real loopback `HFHttpServer`: shared memory when it can, HTTP when told or it cannot."""

from __future__ import annotations

import base64
import errno
import gc
import logging
import os

import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.handoff import handoff_dir
from verl_core.rollout.hf import HFHttpServer
from verl_core.rollout.owned_files import owner
from verl_core.rollout.shm_weights import PREFIX
from verl_core.rollout.weight_push import WeightPusher
from verl_core.testing.server_contract import run
from verl_core.testing.tiny_llm import build_tiny_llm, random_state_dict


def _segments() -> set[str]:
    """This process's weight segments (the pusher writes them here; another xdist worker's trainer has its own)."""
    names = {p for p in os.listdir(handoff_dir()) if p.startswith(PREFIX)}
    return {n for n in names if (owner(n) or (os.getpid(),))[0] == os.getpid()}


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return build_tiny_llm(tmp_path_factory.mktemp("tiny-llm"))


@pytest.fixture(scope="module")
def server(llm):
    server = HFHttpServer(RolloutConfig(model={"path": str(llm)}, device="cpu", request_timeout_s=30))
    run(server.launch())
    yield server
    run(server.shutdown())


def _counters(server) -> tuple[int, int]:
    c = server.metrics_snapshot()["counters"]
    return c.get("weight_updates", 0), c.get("weight_updates_shm", 0)


def _push(pusher: WeightPusher, server, weights, version: int) -> dict[str, float]:
    """The push's transport counts; checks the server answered that it serves `version` now."""
    out = pusher.push([server.address], weights, version=version, peft_config=None, bucket_bytes=1 << 16, timeout_s=60)
    assert out.pop("served_versions") == [version] == [server.weight_version]
    return out


def _served_equal(server, weights) -> bool:
    served = run(server.served_weights(list(weights)))
    return all(torch.equal(served[n], t) for n, t in weights.items())


LOGGER = "verl_core.rollout.weight_push"
SHM = {"shm_servers": 1.0, "cuda_ipc_servers": 0.0}
HTTP = {"shm_servers": 0.0, "cuda_ipc_servers": 0.0}


def _push_each(pusher: WeightPusher, server, llm, seeds, caplog) -> tuple[list[dict[str, float]], list[str]]:
    """Pushes `random_state_dict(llm, seed)` per seed as the next version, each checked served; returns each push's
    transport counts and the warnings `weight_push` logged meanwhile."""
    outs = []
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        for seed in seeds:
            weights = random_state_dict(llm, seed=seed)
            outs.append(_push(pusher, server, weights, server.weight_version + 1))
            assert _served_equal(server, weights)
    return outs, [r.getMessage() for r in caplog.records if r.name == LOGGER]


@pytest.fixture
def on_gpu(monkeypatch):
    """`on_gpu(share_cuda)`: the pusher takes the weights for GPU tensors and shares them through `share_cuda`."""
    from verl_core.rollout import weight_push

    def arm(share_cuda) -> None:
        monkeypatch.setattr(weight_push, "_on_gpu", lambda weights: True)
        monkeypatch.setattr(weight_push, "share_cuda", share_cuda)

    return arm


def test_loopback_servers_get_the_segment_written_once_and_reused(server, llm, caplog):
    before = _segments()
    pusher = WeightPusher()
    updates, shm = _counters(server)
    try:
        assert _push_each(pusher, server, llm, (1, 2), caplog) == ([SHM, SHM], [])
        assert pusher.segment is not None and pusher.segment.generation == 2
        assert len(_segments() - before) == 1
    finally:
        pusher.close()
    assert _counters(server) == (updates + 2, shm + 2)
    assert _segments() == before


def test_transport_http_streams_to_loopback_servers_too(server, llm):
    pusher = WeightPusher("http")
    updates, shm = _counters(server)
    weights = random_state_dict(llm, seed=3)
    assert _push(pusher, server, weights, server.weight_version + 1) == HTTP
    assert _served_equal(server, weights) and pusher.segment is None
    assert _counters(server) == (updates + 1, shm)


def test_no_room_for_the_segment_warns_once_and_falls_back_to_http(server, llm, monkeypatch, caplog):
    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    before = _segments()
    pusher = WeightPusher()
    updates, shm = _counters(server)
    outs, warnings = _push_each(pusher, server, llm, (4, 5), caplog)
    assert outs == [HTTP, HTTP]
    assert len(warnings) == 1 and handoff_dir() in warnings[0] and "No space left" in warnings[0], warnings
    assert _counters(server) == (updates + 2, shm)
    assert _segments() == before
    pusher.close()


def test_a_server_that_cannot_open_the_gpu_handles_gets_the_segment_from_then_on(server, llm, on_gpu, caplog):
    """The fallback of a CUDA IPC push (real server and HTTP; the GPU side stood in): this CPU server answers 422
    `device_uuid`, the pusher warns once naming it, serves it through the segment and never offers it handles again."""
    shared = []

    def share_cuda(weights):
        shared.append(len(weights))
        handle = base64.b64encode(b"\1" * 64).decode()
        storage = {
            "handle": handle,
            "size_bytes": 1 << 20,
            "offset_bytes": 0,
            "ref_counter_handle": handle,
            "ref_counter_offset": 0,
            "event_handle": None,
            "event_sync_required": False,
            "nbytes": 4,
        }
        manifest = [{"name": "x", "dtype": "float32", "shape": [1], "storage": 0, "offset": 0}]
        return {"device_uuid": "GPU-not-here", "storages": [storage], "manifest": manifest}  # fmt: skip

    on_gpu(share_cuda)
    pusher = WeightPusher()
    assert pusher.wants_device_tensors([server.address])
    updates, shm = _counters(server)
    try:
        outs, warnings = _push_each(pusher, server, llm, (6, 7), caplog)
    finally:
        pusher.close()
    assert outs == [SHM, SHM]
    assert len(shared) == 1 and not pusher.wants_device_tensors([server.address])
    assert len(warnings) == 1 and server.address in warnings[0] and "CUDA" in warnings[0], warnings
    assert _counters(server) == (updates + 2, shm + 2)
    assert "weight_updates_cuda_ipc" not in server.metrics_snapshot()["counters"]


def test_gpu_memory_that_cannot_be_shared_warns_once_and_uses_the_segment(server, llm, on_gpu, caplog):
    def share_cuda(weights):
        raise RuntimeError("expandable segments cannot be shared")

    on_gpu(share_cuda)
    pusher = WeightPusher()
    try:
        outs, warnings = _push_each(pusher, server, llm, (8, 9), caplog)
    finally:
        pusher.close()
    assert outs == [SHM, SHM]
    assert len(warnings) == 1 and "expandable segments" in warnings[0], warnings


def test_an_unknown_transport_is_an_error_naming_the_key():
    with pytest.raises(ValueError, match="update_weights_transport"):
        WeightPusher("nccl")


def test_pushes_reuse_one_client_per_server_until_close(server, llm, monkeypatch, caplog):
    """One client (one keep-alive connection) per server from push to push, on the pusher's loop thread."""
    import threading

    from verl_core.rollout import weight_push

    made = []

    class Counting(weight_push.RolloutClient):
        def __init__(self, *args, **kwargs):
            made.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(weight_push, "RolloutClient", Counting)
    pusher = WeightPusher("http")
    assert _push_each(pusher, server, llm, (6, 7, 8), caplog) == ([HTTP] * 3, [])
    assert made == [server.address]
    thread = pusher._thread
    assert thread in threading.enumerate()
    pusher.close()
    assert not thread.is_alive()
    _push(pusher, server, random_state_dict(llm, seed=9), server.weight_version + 1)  # usable again after close
    assert made == [server.address] * 2
    thread = pusher._thread
    del pusher  # dropped without close: its loop thread stops too
    gc.collect()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_clients_of_servers_a_push_no_longer_addresses_are_closed(server, llm, monkeypatch):
    """A replica restarted on a new address: the client kept for the old one is closed, not left idle."""
    from verl_core.rollout import weight_push

    closed = []

    class Tracking(weight_push.RolloutClient):
        async def aclose(self):
            closed.append(self.address)
            await super().aclose()

    monkeypatch.setattr(weight_push, "RolloutClient", Tracking)
    pusher = WeightPusher("http")
    other = server.address.replace("127.0.0.1", "localhost")  # the same server under a second address
    assert other != server.address
    try:
        for address in (server.address, server.address, other):
            version = server.weight_version + 1
            out = pusher.push([address], random_state_dict(llm, seed=version), version=version, peft_config=None,
                              bucket_bytes=1 << 16, timeout_s=60)  # fmt: skip
            assert out["served_versions"] == [version]
        assert closed == [server.address]
        assert [key[0] for key in pusher._clients] == [other]
    finally:
        pusher.close()
    assert sorted(closed) == sorted([server.address, other])
