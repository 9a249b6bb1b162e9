"""Same-host transfer files named for their owner's PID, and the sweep of the ones a dead process left behind.

`WeightSegment` (`verl-weights-*`) and `HandoffFiles` (`verl-rollout-*`) create their files in a tmpfs
(`handoff_dir()`, `/dev/shm`), where a file outlives the process that made it. `close`, finalizers and server shutdown
unlink them, but a process killed by SIGKILL, the OOM killer or `ray.kill` runs none of them, and its file (up to the
full weights) holds RAM until the machine reboots. So each name records its owner,
`<prefix><pid>-<pidns>-<uuid4 hex>` (`pidns`: the inode number of `/proc/self/ns/pid`, 0 when it cannot be read), and
the first time a process creates such a file in a directory it calls `sweep_stale_once`, which unlinks the files whose
owner is dead and logs one line with their count and the bytes freed.

A file is removed only when all of these hold: its name matches that pattern exactly, with the prefix `verl-weights-`
or `verl-rollout-`; it is a regular file (a symlink is not followed, nor removed) owned by this process's uid; it was
named in this process's PID namespace (the same `pidns`, not 0); and `os.kill(pid, 0)` raises `ProcessLookupError`.
An owner that is alive keeps its files, also one running under another uid (`PermissionError`).

Limits, all on the conservative side:

- PID reuse: once a dead owner's PID belongs to another process, its file is kept until a later sweep (by a process
  that creates its first file there) finds that PID free again. A live process's file never looks dead.
- PID namespaces: a PID means something only inside its namespace. The sweep assumes that whoever cleans up after a
  process shares its PID namespace: processes of one container, or of the host, as the trainer's and the rollout
  servers' Ray actors on one node do. Processes in different namespaces that share the directory (containers of a
  Kubernetes pod sharing an `emptyDir` at `/dev/shm` without `shareProcessNamespace`, say) never remove each other's
  files, live or dead, since the names carry the namespace: their leftovers wait for a process of their own namespace.
  Without a readable `/proc/self/ns/pid` a process names its files with namespace 0 and sweeps nothing; nobody
  sweeps files named with 0.
- Names of earlier versions (`<prefix><uuid hex>`, no PID) are never swept.
- Unlinking a file that a live process still maps (a server holding a dead sender's segment) frees its memory only
  once that mapping goes. A hand-off file of a server killed after it answered can be swept before its client claims
  it; the client then gets the missing-file `BadResponseError`.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import stat
import threading
import uuid

__all__ = [
    "PREFIXES",
    "ROLLOUT_PREFIX",
    "WEIGHTS_PREFIX",
    "owned_name",
    "owner",
    "pid_namespace",
    "sweep_stale",
    "sweep_stale_once",
]

logger = logging.getLogger(__name__)

WEIGHTS_PREFIX = "verl-weights-"  # `verl_core.rollout.shm_weights.PREFIX`
ROLLOUT_PREFIX = "verl-rollout-"  # `verl_core.rollout.handoff.PREFIX`
PREFIXES = (WEIGHTS_PREFIX, ROLLOUT_PREFIX)
_NAME = re.compile(rf"(?:{'|'.join(map(re.escape, PREFIXES))})([1-9][0-9]{{0,9}})-([0-9]{{1,20}})-[0-9a-f]{{32}}")

_swept: set[tuple[int, str]] = set()  # (pid, real directory): a fork sweeps again
_swept_lock = threading.Lock()


@functools.cache
def pid_namespace() -> int:
    """This process's PID namespace as the inode number of `/proc/self/ns/pid`; 0 when it cannot be read."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owned_name(prefix: str) -> str:
    """A fresh file name `<prefix><pid>-<pidns>-<uuid4 hex>` that names this process as the owner."""
    return f"{prefix}{os.getpid()}-{pid_namespace()}-{uuid.uuid4().hex}"


def owner(name: str) -> tuple[int, int] | None:
    """`(pid, pidns)` of a name `owned_name` made (no directory part), or `None` for any other name."""
    match = _NAME.fullmatch(name)
    return (int(match[1]), int(match[2])) if match else None


def sweep_stale(directory: str) -> tuple[int, int]:
    """Unlink the files in `directory` that dead processes of this PID namespace and uid left behind.

    Returns `(files removed, bytes freed)` and logs one line when it removed any. Never raises: a directory that
    cannot be listed, or a file that cannot be removed, is skipped.
    """
    namespace = pid_namespace()
    if not namespace:
        return 0, 0
    uid = os.getuid()
    removed = freed = 0
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return 0, 0
    try:
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                found = owner(entry.name)
                if found is None or found[1] != namespace:
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode) or st.st_uid != uid or _alive(found[0]):
                        continue
                    os.unlink(entry.name, dir_fd=dir_fd)
                except OSError:  # gone meanwhile (another process swept it), or not ours to remove
                    continue
                removed += 1
                freed += st.st_blocks * 512
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    if removed:
        logger.warning("removed %d file(s) that dead processes left in %s: %d bytes freed", removed, directory, freed)
    return removed, freed


def sweep_stale_once(directory: str) -> tuple[int, int]:
    """`sweep_stale(directory)` the first time this process asks for that directory; `(0, 0)` after that."""
    key = (os.getpid(), os.path.realpath(directory))
    with _swept_lock:
        if key in _swept:
            return 0, 0
        _swept.add(key)
    return sweep_stale(directory)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: alive under another uid; anything else: keep the file
        return True
    return True
