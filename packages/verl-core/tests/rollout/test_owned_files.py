"""Same-host transfer files named for their owner's PID: a new segment or hand-off file sweeps away the files of
dead processes, and nothing else (live owners, other namespaces, other users, other names)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from verl_core.rollout import handoff, owned_files, shm_weights
from verl_core.rollout.errors import BadResponseError, WeightSyncError
from verl_core.rollout.handoff import HandoffFiles, claim_handoff
from verl_core.rollout.owned_files import (
    PREFIXES,
    ROLLOUT_PREFIX,
    WEIGHTS_PREFIX,
    owned_name,
    owner,
    pid_namespace,
    sweep_stale,
)
from verl_core.rollout.shm_weights import MappedSegments, WeightSegment
from verl_core.rollout.tensor_payload import plan_tensor_body

pytestmark = pytest.mark.skipif(not pid_namespace(), reason="needs a readable /proc/self/ns/pid")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: os.kill(pid, 0) raises ProcessLookupError (unless the PID is reused meanwhile)
    return proc.pid


@pytest.fixture
def live_pid() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def _name(prefix: str, pid: int, namespace: int | None = None) -> str:
    return f"{prefix}{pid}-{pid_namespace() if namespace is None else namespace}-{uuid.uuid4().hex}"


def _plant(directory: Path, name: str, size: int = 8192) -> Path:
    path = directory / name
    path.write_bytes(b"\1" * size)
    return path


def _allocate_segment(directory: Path) -> str:
    segment = WeightSegment(str(directory))
    try:
        return segment.write({"w": torch.ones(16)})["path"]
    finally:
        segment.close()


def _allocate_handoff(directory: Path) -> str:
    files = HandoffFiles(grace_s=60.0, directory=str(directory))
    try:
        return files.write(plan_tensor_body({"x": torch.arange(4.0)}))["path"]
    finally:
        files.close()


ALLOCATORS: dict[str, Callable[[Path], str]] = {"segment": _allocate_segment, "handoff": _allocate_handoff}


def test_prefixes_are_the_modules_constants_and_names_parse_back():
    assert PREFIXES == (shm_weights.PREFIX, handoff.PREFIX) == (WEIGHTS_PREFIX, ROLLOUT_PREFIX)
    for prefix in PREFIXES:
        assert owner(owned_name(prefix)) == (os.getpid(), pid_namespace())
    assert owner(f"{WEIGHTS_PREFIX}{uuid.uuid4().hex}") is None  # the names of earlier versions carry no owner


@pytest.mark.parametrize("allocate", list(ALLOCATORS), ids=list(ALLOCATORS))
def test_the_first_allocation_removes_dead_owners_files_and_keeps_everything_else(tmp_path, live_pid, caplog, allocate):
    dead = _dead_pid()
    stale = [_plant(tmp_path, _name(prefix, dead)) for prefix in PREFIXES]
    freed = sum(p.stat().st_blocks * 512 for p in stale)
    kept = [_plant(tmp_path, _name(prefix, live_pid)) for prefix in PREFIXES]  # a live owner
    kept += [_plant(tmp_path, _name(prefix, os.getpid())) for prefix in PREFIXES]  # this process
    hex32 = uuid.uuid4().hex
    for name in (
        f"{WEIGHTS_PREFIX}{hex32}",  # an earlier version's name: no owner
        f"{WEIGHTS_PREFIX}{dead}-{pid_namespace()}-{hex32}.bak",  # not exactly the pattern
        f"{ROLLOUT_PREFIX}{dead}-{pid_namespace()}-{hex32.upper()}",
        f"{ROLLOUT_PREFIX}{dead}-{hex32}",
        f"verl-other-{dead}-{pid_namespace()}-{hex32}",
        _name(WEIGHTS_PREFIX, dead, namespace=pid_namespace() + 1),  # another PID namespace: its PIDs are not ours
        _name(ROLLOUT_PREFIX, dead, namespace=0),  # a process that could not read its namespace
    ):
        kept.append(_plant(tmp_path, name))
    target = _plant(tmp_path, "target")
    link = tmp_path / _name(WEIGHTS_PREFIX, dead)
    link.symlink_to(target)  # matching name, not a regular file
    folder = tmp_path / _name(ROLLOUT_PREFIX, dead)
    folder.mkdir()
    with caplog.at_level(logging.INFO, logger=owned_files.__name__):
        created = ALLOCATORS[allocate](tmp_path)
    assert owner(os.path.basename(created)) == (os.getpid(), pid_namespace())
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept) and target.exists() and link.is_symlink() and folder.is_dir()
    lines = [r.getMessage() for r in caplog.records if r.name == owned_files.__name__]
    assert lines == [f"removed 2 file(s) that dead processes left in {tmp_path}: {freed} bytes freed"]


@pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")
def test_a_dead_owners_file_of_another_user_is_kept(tmp_path):
    foreign = _plant(tmp_path, _name(WEIGHTS_PREFIX, _dead_pid()))
    os.chown(foreign, os.getuid() + 12345, -1)
    assert sweep_stale(str(tmp_path)) == (0, 0) and foreign.exists()


def test_an_owner_alive_under_another_user_keeps_its_file(tmp_path, monkeypatch):
    other = _dead_pid()
    path = _plant(tmp_path, _name(ROLLOUT_PREFIX, other))
    real_kill = os.kill

    def kill(pid: int, sig: int) -> None:  # what a process of another uid answers a non-root sender
        if pid == other:
            raise PermissionError(1, "Operation not permitted")
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", kill)
    assert sweep_stale(str(tmp_path)) == (0, 0) and path.exists()


def test_the_sweep_runs_once_per_process_and_directory(tmp_path):
    _allocate_handoff(tmp_path)
    later = _plant(tmp_path, _name(WEIGHTS_PREFIX, _dead_pid()))
    _allocate_segment(tmp_path)  # the same directory again: no second sweep
    assert later.exists()
    assert sweep_stale(str(tmp_path))[0] == 1 and not later.exists()


def test_receivers_accept_the_new_names_and_refuse_others(tmp_path):
    mapped = MappedSegments(str(tmp_path))
    for name in (owned_name(WEIGHTS_PREFIX), f"{WEIGHTS_PREFIX}{uuid.uuid4().hex}"):  # new and earlier senders
        mapped._check_path(str(tmp_path / name))
    for path in (
        tmp_path / owned_name(ROLLOUT_PREFIX),
        tmp_path / "precious",
        tmp_path / ".." / tmp_path.name / owned_name(WEIGHTS_PREFIX),
        tmp_path.parent / owned_name(WEIGHTS_PREFIX),
    ):
        with pytest.raises(WeightSyncError) as info:
            mapped._check_path(str(path))
        assert info.value.field == "path"
    files = HandoffFiles(grace_s=60.0, directory=str(tmp_path))
    meta = files.write(plan_tensor_body({"x": torch.arange(4.0)}))
    assert owner(os.path.basename(meta["path"])) == (os.getpid(), pid_namespace())
    assert torch.equal(claim_handoff(meta)["x"], torch.arange(4.0)) and not os.path.exists(meta["path"])
    foreign = _plant(tmp_path, owned_name(WEIGHTS_PREFIX), size=64)
    with pytest.raises(BadResponseError, match=f"not a {ROLLOUT_PREFIX}"):
        claim_handoff({"path": str(foreign), "size": 64})
    assert foreign.exists()


_KILLED_SENDER = textwrap.dedent(
    """
    import sys, time, torch
    from verl_core.rollout.shm_weights import WeightSegment
    segment = WeightSegment(sys.argv[1])
    print(segment.write({"w": torch.ones(1 << 18)})["path"], flush=True)
    time.sleep(120)
    """
)


@pytest.mark.slow  # about 5 s on 2 cores: the killed sender imports torch
def test_a_sigkilled_senders_segment_is_removed_by_the_next_segment(tmp_path, caplog):
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_SENDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        path = proc.stdout.readline().strip()
    finally:
        proc.send_signal(signal.SIGKILL)  # no close, no finalizer, no atexit
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert owner(os.path.basename(path)) == (proc.pid, pid_namespace())
    assert os.path.getsize(path) == 1 << 20  # left behind: 1 MiB of tmpfs-like memory
    with caplog.at_level(logging.INFO, logger=owned_files.__name__):
        segment = WeightSegment(str(tmp_path))
        try:
            mine = segment.write({"w": torch.zeros(4)})["path"]
            assert not os.path.exists(path) and os.listdir(tmp_path) == [os.path.basename(mine)]
        finally:
            segment.close()
    assert os.listdir(tmp_path) == []
    assert any("removed 1 file(s)" in r.getMessage() for r in caplog.records)
