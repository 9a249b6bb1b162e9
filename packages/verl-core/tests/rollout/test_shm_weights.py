"""Same-host weight sync through a shared-memory segment: round trip, reuse, growth, bad descriptors, cleanup."""

from __future__ import annotations

import errno
import gc
import glob
import os

import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.errors import WeightSyncError
from verl_core.rollout.framing import DTYPES
from verl_core.rollout.handoff import handoff_dir
from verl_core.rollout.hf import HFHttpServer
from verl_core.rollout.owned_files import owner
from verl_core.rollout.shm_weights import PREFIX, MappedSegments, SegmentAllocationError, WeightSegment
from verl_core.rollout.weights import WeightUpdate
from verl_core.testing.server_contract import run
from verl_core.testing.tiny_llm import random_state_dict


def _segments() -> set[str]:
    """This process's weight segments (a run beside this one, another xdist worker's trainer say, has its own)."""
    paths = glob.glob(os.path.join(handoff_dir(), f"{PREFIX}*"))
    return {p for p in paths if (owner(os.path.basename(p)) or (os.getpid(),))[0] == os.getpid()}


def _mixed() -> dict[str, torch.Tensor]:
    """Every supported dtype, a 0-size tensor, a non-contiguous one, and one far larger than a 256-byte bucket."""
    gen = torch.Generator().manual_seed(0)
    out = {}
    for i, (name, dtype) in enumerate(DTYPES.items()):
        raw = torch.randint(0, 256, ((i + 1) * 13 * dtype.itemsize,), dtype=torch.uint8, generator=gen)
        out[f"t.{name}"] = raw.view(dtype).view(-1) if dtype != torch.bool else raw.remainder(2).bool()
    out["empty"] = torch.zeros(0, 5, dtype=torch.bfloat16)
    out["strided"] = torch.arange(24, dtype=torch.float32).view(4, 6).t()
    out["big"] = torch.randn(3, 1000, generator=gen)
    return out


async def _collect(mapped, bucket_bytes: int) -> tuple[dict[str, torch.Tensor], int]:
    update = WeightUpdate(1, "full", mapped.specs)
    got: dict[str, torch.Tensor] = {}
    buckets = 0
    async for bucket in mapped.buckets(update, bucket_bytes):
        buckets += 1
        assert sum(t.numel() * t.element_size() for _, t, _ in bucket) <= bucket_bytes
        for name, tensor, start in bucket:
            if start is None:
                got[name] = tensor.clone()
            else:
                spec = update.spec(name)
                flat = got.setdefault(name, torch.empty(spec.shape, dtype=tensor.dtype)).view(-1)
                flat[start : start + tensor.numel()] = tensor
    return got, buckets


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8) if t.numel() else t


def test_segment_round_trip_is_bit_exact_for_every_dtype_and_shape():
    sent = _mixed()
    segment, mapped = WeightSegment(), MappedSegments()
    try:
        descriptor = segment.write(sent)
        got, buckets = run(_collect(mapped.open(descriptor), 256))
    finally:
        mapped.close()
        segment.close()
    assert buckets > 12  # "big" (12000 bytes) alone travels as >= 47 slices of <= 256 bytes
    assert list(got) == list(sent)
    for name, t in sent.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape, name
        assert torch.equal(_bits(got[name]), _bits(t)), name


def test_segment_is_reused_while_updates_fit_and_replaced_when_one_grows():
    before = _segments()
    segment = WeightSegment()
    try:
        first = segment.write({"a": torch.ones(1000)})
        second = segment.write({"a": torch.full((2000,), 2.0)})
        assert (second["path"], second["inode"], second["size"]) == (first["path"], first["inode"], first["size"])
        assert second["generation"] == first["generation"] + 1
        grown = segment.write({"a": torch.zeros(first["size"] // 4 + 1)})
        assert grown["path"] != first["path"] and grown["size"] > first["size"]
        assert not os.path.exists(first["path"])
        assert _segments() - before == {grown["path"]}
        assert os.stat(grown["path"]).st_mode & 0o777 == 0o600
    finally:
        segment.close()
    assert _segments() == before
    segment.close()  # idempotent


def test_segment_file_goes_at_garbage_collection():
    before = _segments()
    segment = WeightSegment()
    path = segment.write({"a": torch.ones(8)})["path"]
    assert os.path.exists(path)
    del segment
    gc.collect()
    assert not os.path.exists(path) and _segments() == before


def test_a_full_tmpfs_is_a_clean_error_naming_directory_size_and_free_space(monkeypatch):
    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    before = _segments()
    segment = WeightSegment()
    with pytest.raises(SegmentAllocationError, match=r"cannot reserve 4194304 bytes .* in /dev/shm.* bytes free") as e:
        segment.write({"a": torch.ones(1 << 20)})
    assert e.value.errno == errno.ENOSPC
    assert _segments() == before and segment.path is None


# ---- through a real server ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tiny_llm_path):
    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu", request_timeout_s=30))
    run(server.launch())
    yield server
    run(server.shutdown())


async def _push_shm(address: str, descriptor, **kwargs):
    client = RolloutClient(address, weight_timeout_s=60)
    try:
        return await client.update_weights_shm(descriptor, **kwargs)
    finally:
        await client.aclose()


def _served_equal(server, weights) -> list[str]:
    served = run(server.served_weights(list(weights)))
    return [n for n, t in weights.items() if not torch.equal(served[n], t.to(served[n].dtype))]


def test_shm_update_through_the_server_serves_exactly_the_sent_weights(server, tiny_llm_path):
    weights = random_state_dict(tiny_llm_path, seed=11)
    names = list(weights)
    weights[names[0]] = weights[names[0]].to(torch.bfloat16)  # mixed dtypes: the engine casts on load
    assert _served_equal(server, weights)
    largest = max(t.numel() * t.element_size() for t in weights.values())
    bucket = max(64, largest // 3)
    counters = server.metrics_snapshot()["counters"]
    segment = WeightSegment()
    try:
        descriptor = segment.write(weights)
        version = server.weight_version + 1
        result = run(_push_shm(server.address, descriptor, version=version, bucket_bytes=bucket))
        assert result["weight_version"] == version and result["num_tensors"] == len(weights)
        assert result["num_buckets"] >= 3
        assert not _served_equal(server, weights)
        assert server.weight_segments._key == (descriptor["path"], descriptor["inode"], descriptor["size"])
        mapping = server.weight_segments._mm
        # the same file again, new values: the server reads them through the mapping it kept
        again = random_state_dict(tiny_llm_path, seed=12)
        second = segment.write(again)
        assert second["path"] == descriptor["path"]
        run(_push_shm(server.address, second, version=version + 1))
        assert not _served_equal(server, again)
        assert server.weight_segments._mm is mapping
        # a grown segment: the server maps the new file and drops the old mapping
        segment._allocate(descriptor["size"] * 2)  # what a larger update does: a new file, the old one unlinked
        grown = segment.write(again)
        assert grown["path"] != descriptor["path"] and not os.path.exists(descriptor["path"])
        run(_push_shm(server.address, grown, version=version + 2))
        assert server.weight_segments._key == (grown["path"], grown["inode"], grown["size"])
        assert server.weight_segments._mm is not mapping and mapping.closed  # the old mapping was dropped
    finally:
        segment.close()
    after = server.metrics_snapshot()["counters"]
    assert after.get("weight_updates_shm", 0) - counters.get("weight_updates_shm", 0) == 3
    assert server.weight_version == version + 2


def _bad(descriptor: dict, tmp_path, case: str) -> tuple[dict, str]:
    d = {**descriptor, "manifest": [dict(e) for e in descriptor["manifest"]]}
    first = d["manifest"][0]["name"]
    if case == "missing-file":
        d["path"] = os.path.join(handoff_dir(), f"{PREFIX}does-not-exist")
        return d, "path"
    if case == "wrong-size":
        d["size"] += 4096
        return d, "size"
    if case == "wrong-inode":
        d["inode"] += 1
        return d, "inode"
    if case == "out-of-bounds":
        d["manifest"][0]["offset"] = d["size"]
        return d, first
    if case == "misaligned":
        d["manifest"][0]["offset"] += 4
        return d, first
    if case == "duplicate":
        d["manifest"].append(dict(d["manifest"][0]))
        return d, first
    if case == "foreign-directory":
        foreign = tmp_path / os.path.basename(d["path"])
        foreign.write_bytes(b"\0" * d["size"])
        d["path"], d["inode"] = str(foreign), foreign.stat().st_ino
        return d, "path"
    if case == "dot-dot":
        d["path"] = os.path.join(handoff_dir(), "..", os.path.basename(handoff_dir()), os.path.basename(d["path"]))
        return d, "path"
    if case == "foreign-owner":  # needs root to give the file away
        os.chown(d["path"], os.getuid() + 12345, -1)
        return d, "path"
    if case == "not-a-regular-file":
        link = os.path.join(handoff_dir(), f"{PREFIX}link-{os.getpid()}")
        os.symlink(d["path"], link)
        d["path"] = link
        return d, "path"
    raise AssertionError(case)


BAD = [
    "missing-file",
    "wrong-size",
    "wrong-inode",
    "out-of-bounds",
    "misaligned",
    "duplicate",
    "foreign-directory",
    "dot-dot",
    "not-a-regular-file",
    pytest.param("foreign-owner", marks=pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")),
]


@pytest.mark.parametrize("case", BAD)
def test_a_bad_descriptor_is_a_4xx_naming_the_field_and_serving_is_unchanged(server, tiny_llm_path, tmp_path, case):
    weights = random_state_dict(tiny_llm_path, seed=21)
    before = run(server.served_weights(list(weights)))
    version = server.weight_version
    cached = server.weight_segments._mm
    segment = WeightSegment()
    try:
        bad, field = _bad(segment.write(weights), tmp_path, case)
        with pytest.raises(WeightSyncError) as info:
            run(_push_shm(server.address, bad, version=version + 1))
    finally:
        segment.close()
        if case == "not-a-regular-file":
            os.unlink(bad["path"])
    assert info.value.status_code == 422 and info.value.field == field, info.value
    assert server.weight_version == version
    if case in ("missing-file", "wrong-size", "wrong-inode", "not-a-regular-file"):
        assert server.weight_segments._mm is cached  # a bad file does not cost the mapping of the good one
    after = run(server.served_weights(list(weights)))
    assert all(torch.equal(before[n], after[n]) for n in weights)
    assert server.readiness() == (True, "ready")


@pytest.mark.parametrize("case", ["duplicate", "out-of-bounds", "misaligned"])
def test_manifest_checks_hold_without_the_backend(tmp_path, case):
    """The segment checks its manifest itself: a backend that checks nothing gets no bad view."""
    segment, mapped = WeightSegment(), MappedSegments()
    try:
        bad, field = _bad(segment.write({"a": torch.ones(4), "b": torch.ones(2)}), tmp_path, case)
        with pytest.raises(WeightSyncError) as info:
            mapped.open(bad)
        assert info.value.field == field
    finally:
        mapped.close()
        segment.close()


def test_shutdown_drops_the_cached_mapping(tiny_llm_path):
    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"))
    run(server.launch())
    segment = WeightSegment()
    try:
        run(_push_shm(server.address, segment.write(random_state_dict(tiny_llm_path, seed=31)), version=1))
        mapping = server.weight_segments._mm
        assert mapping is not None and not mapping.closed
    finally:
        run(server.shutdown())
        segment.close()
    assert server.weight_segments._mm is None and mapping.closed
