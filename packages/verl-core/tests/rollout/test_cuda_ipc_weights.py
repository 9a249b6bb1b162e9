"""Same-GPU weight sync through CUDA IPC: descriptor checks (CPU) and a second process pushing GPU tensors (GPU)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.cuda_ipc_weights import open_cuda_ipc, share_cuda
from verl_core.rollout.errors import WeightSyncError
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.server_contract import run
from verl_core.testing.tiny_llm import random_state_dict


def _descriptor() -> dict:
    """A well-formed descriptor of two float32 tensors in one 64-byte storage (handles are placeholders)."""
    handle = base64.b64encode(b"\1" * 64).decode()
    return {
        "device_uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "storages": [
            {
                "handle": handle,
                "size_bytes": 2 << 20,
                "offset_bytes": 0,
                "ref_counter_handle": handle,
                "ref_counter_offset": 0,
                "event_handle": None,
                "event_sync_required": False,
                "nbytes": 64,
            }
        ],
        "manifest": [
            {"name": "a", "dtype": "float32", "shape": [4], "storage": 0, "offset": 0},
            {"name": "b", "dtype": "float32", "shape": [2, 2], "storage": 0, "offset": 16},
        ],
    }


def _bad(case: str) -> tuple[dict, str]:
    d = _descriptor()
    storage, entry = d["storages"][0], d["manifest"][1]
    if case == "no-storages":
        d["storages"] = []
        return d, "storages"
    if case == "bad-handle":
        storage["handle"] = "not base64!"
        return d, "storages"
    if case == "negative-size":
        storage["nbytes"] = -1
        return d, "storages"
    if case == "bool-sync":
        storage["event_sync_required"] = "yes"
        return d, "storages"
    if case == "storage-index":
        entry["storage"] = 1
        return d, "b"
    if case == "out-of-bounds":
        entry["offset"] = 56
        return d, "b"
    if case == "misaligned":
        entry["offset"] = 18
        return d, "b"
    if case == "duplicate":
        d["manifest"].append(dict(entry))
        return d, "b"
    if case == "unknown-dtype":
        entry["dtype"] = "float128"
        return d, "b"
    if case == "no-uuid":
        d["device_uuid"] = ""
        return d, "device_uuid"
    raise AssertionError(case)


BAD = ["no-storages", "bad-handle", "negative-size", "bool-sync", "storage-index", "out-of-bounds", "misaligned"]
BAD += ["duplicate", "unknown-dtype", "no-uuid"]


@pytest.mark.parametrize("case", BAD)
def test_a_bad_descriptor_is_refused_naming_the_field_before_any_handle_is_opened(case):
    bad, field = _bad(case)
    with pytest.raises(WeightSyncError) as info:
        open_cuda_ipc(bad)
    assert info.value.field == field, info.value


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only server's answer")
def test_a_server_without_cuda_answers_422_naming_device_uuid_and_keeps_serving(tiny_llm_path):
    """What a `WeightPusher` reads to fall back to shared memory for this server."""
    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"))
    run(server.launch())

    async def push():
        client = RolloutClient(server.address, weight_timeout_s=30)
        try:
            return await client.update_weights_cuda_ipc(_descriptor(), version=1)
        finally:
            await client.aclose()

    try:
        with pytest.raises(WeightSyncError) as info:
            run(push())
        assert info.value.status_code == 422 and info.value.field == "device_uuid"
        assert "no CUDA device" in str(info.value)
        assert server.weight_version == 0 and server.readiness() == (True, "ready")
    finally:
        run(server.shutdown())


def test_share_cuda_refuses_host_tensors_naming_them():
    with pytest.raises(WeightSyncError) as info:
        share_cuda({"w": torch.ones(2)})
    assert info.value.field == "w" and "CUDA" in str(info.value)


# ---- GPU: a second process pushes its GPU tensors ----------------------------------------------------------------

_SENDER = textwrap.dedent(
    """
    import asyncio, json, sys
    import torch
    from verl_core.rollout.client import RolloutClient
    from verl_core.rollout.cuda_ipc_weights import share_cuda
    from verl_core.testing.tiny_llm import random_state_dict

    address, path, seed, version = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    host = random_state_dict(path, seed=seed)
    sizes = [t.numel() for t in host.values()]
    flat = torch.cat([t.reshape(-1) for t in host.values()]).cuda()  # one allocation, as an engine export
    weights = {n: p.view(t.shape) for (n, t), p in zip(host.items(), flat.split(sizes))}
    descriptor = share_cuda(weights)

    async def push():
        client = RolloutClient(address, weight_timeout_s=120)
        try:
            return await client.update_weights_cuda_ipc(descriptor, version=version, bucket_bytes=4096)
        finally:
            await client.aclose()

    out = asyncio.run(push())
    first = descriptor["storages"][0]["handle"]
    # the next update from the same (reused) buffer: new values written just before sharing, the same handle
    flat.copy_(torch.cat([t.reshape(-1) for t in random_state_dict(path, seed=seed + 1).values()]).cuda())
    descriptor, version = share_cuda(weights), version + 1
    second = asyncio.run(push())
    flat.fill_(0)  # after the answer the server holds its own copy
    torch.cuda.synchronize()
    same = descriptor["storages"][0]["handle"] == first
    print(json.dumps({"storages": len(descriptor["storages"]), "same_handle": same, "first": out, **second}))
    """
)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_a_second_process_pushes_gpu_tensors_by_cuda_ipc_mapping_its_buffer_once(tiny_llm_path):
    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cuda", request_timeout_s=60))
    run(server.launch())
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        done = subprocess.run(
            [sys.executable, "-c", _SENDER, server.address, str(tiny_llm_path), "5", "3"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        out = json.loads(done.stdout.strip().splitlines()[-1])
        expected = random_state_dict(tiny_llm_path, seed=6)  # the second update's values
        assert out["storages"] == 1 and out["first"]["weight_version"] == 3 and out["weight_version"] == 4
        assert out["num_buckets"] > 1 and out["same_handle"]
        served = run(server.served_weights(list(expected)))
        wrong = [n for n, t in expected.items() if not torch.equal(served[n], t.to(served[n].dtype))]
        assert not wrong, wrong[:3]  # the sender zeroed its buffer after the answer: the server copied
        assert server.metrics_snapshot()["counters"]["weight_updates_cuda_ipc"] == 2
        assert server.cuda_ipc_mappings.mapped == 1  # the second update found the first one's mapping
    finally:
        run(server.shutdown())
