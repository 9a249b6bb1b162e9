"""Ctrl-C of a real tiny `verl-omni-train` run: SIGINT to its process group during the servers' launch, during a
step and during a checkpoint save. Each exits 130 with one line (last checkpoint, resume command) and nothing else
the interruption caused, stops Ray, leaves no shared-memory segment, and its last checkpoint resumes.

Mutations these tests were run against (each failed the test named):
- `main.run` returning `EXIT_FAILED` on `KeyboardInterrupt`: every `test_ctrl_c_*` (exit code).
- `ColocatedRollout._run` not cancelling its call on `KeyboardInterrupt`: the step test ("WARNING ... rollout server
  rank 0 is dead: ... is unreachable", the in-flight request cut by the shutdown).
- `ColocatedRollout` without its loop exception handler `_quiet_cancelled`: the launch test ("ERROR asyncio:
  _GatheringFuture exception was never retrieved").
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from verl_core.rollout.handoff import handoff_dir
from verl_core.rollout.owned_files import PREFIXES, owner
from verl_omni.trainer.checkpoint import CheckpointManager
from verl_omni.trainer.report import read_metrics

pytestmark = [pytest.mark.ray, pytest.mark.slow]

_MODULE = [sys.executable, "-m", "verl_omni.trainer.main"]
_NOISE = re.compile(r"Traceback|ERROR|WARNING|Task was destroyed|is dead|unreachable|KeyboardInterrupt|Exception")
_DEADLINE_S = 300


def _segments() -> set[str]:
    return {n for n in os.listdir(handoff_dir()) if n.startswith(PREFIXES)}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _session_pids(sid: int) -> list[int]:
    """Processes of session `sid` (the run's: its Ray processes and workers stay in it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def _interrupt(
    argv: list[str], cwd: pathlib.Path, fire: Callable[[list[str]], bool]
) -> tuple[int, list[str], int, int]:
    """Start `argv` in its own session; SIGINT its process group once `fire(lines)` is true.

    Returns:
        (exit code, output lines, index of the first line after the SIGINT, the run's session id).
    """
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # a runner started in the background (`cmd &`) passes SIGINT on as ignored, and Python then never raises
        # KeyboardInterrupt: give the run the default disposition a terminal's Ctrl-C meets
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + _DEADLINE_S
    sent_at = None
    while proc.poll() is None and time.monotonic() < deadline:
        if fire(lines):
            sent_at = len(lines)
            os.killpg(proc.pid, signal.SIGINT)
            break
        time.sleep(0.002)
    try:
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    reader.join(timeout=30)
    assert sent_at is not None, "the run ended before the moment came:\n" + "".join(lines[-30:])
    return code, [line.rstrip("\n") for line in lines], sent_at, proc.pid


def _run_argv(model, fast: list[str], folder: pathlib.Path) -> list[str]:
    return [
        *_MODULE,
        f"actor_rollout_ref.model.path={model}",
        *fast,
        "trainer.val_before_train=false",
        "trainer.total_training_steps=100",  # far more than the test waits for
        "trainer.save_freq=2",
        f"trainer.run_dir={folder / 'run'}",
        f"trainer.default_local_dir={folder / 'ckpt'}",
    ]


def _check_interrupted(code: int, lines: list[str], sent_at: int, sid: int, before: set[str]) -> str:
    """Exit 130, one line, no noise after the SIGINT, Ray stopped, no segment left; returns the line."""
    tail = "\n".join(lines[-40:])
    assert code == 130, tail
    said = [line for line in lines if line.startswith("verl-omni-train: interrupted")]
    assert len(said) == 1, tail
    noise = [line for line in lines[sent_at:] if _NOISE.search(line)]
    assert noise == [], noise
    deadline = time.monotonic() + 30
    while _session_pids(sid) and time.monotonic() < deadline:  # the driver has exited; Ray's processes follow
        time.sleep(0.2)
    assert _session_pids(sid) == [], "processes of the run outlive it (Ray not stopped)"
    leaked = [n for n in _segments() - before if not _alive(owner(n)[0])]  # a live owner is another test's
    assert leaked == [], leaked
    return said[0]


def _resume_from_line(line: str, cwd: pathlib.Path) -> list[dict]:
    """Run the printed resume command for one more step; return the run's metrics rows."""
    words = shlex.split(line.split("resume: ", 1)[1])
    assert words[0] == "verl-omni-train"
    argv = [*_MODULE, *words[1:]]
    start = int(re.search(r"\(step (\d+)\)", line).group(1))
    argv = [w for w in argv if not w.startswith("trainer.total_training_steps=")]
    argv.append(f"trainer.total_training_steps={start + 1}")
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=_DEADLINE_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    folder = pathlib.Path(next(w for w in argv if w.startswith("trainer.run_dir=")).split("=", 1)[1])
    return read_metrics(folder / "metrics.jsonl")


def test_ctrl_c_during_the_server_launch(tiny_qwen_image_path, fast_overrides, tmp_path):
    before = _segments()
    argv = _run_argv(tiny_qwen_image_path, fast_overrides, tmp_path)
    # the rollout server (a Ray actor, its output forwarded to the driver's) loads its pipeline: the launch is under way
    code, lines, sent_at, sid = _interrupt(argv, tmp_path, lambda lines: any("Loading pipeline" in x for x in lines))
    line = _check_interrupted(code, lines, sent_at, sid, before)
    assert "interrupted during setup; no checkpoint saved; start again: verl-omni-train " in line
    assert CheckpointManager(tmp_path / "ckpt").steps() == []


def test_ctrl_c_during_a_step_names_the_checkpoint_and_its_resume_command(
    tiny_qwen_image_path, fast_overrides, tmp_path
):
    before = _segments()
    metrics = tmp_path / "run" / "metrics.jsonl"

    def third_step_logged(_lines: list[str]) -> bool:  # step 4 is under way
        return metrics.is_file() and metrics.read_text().count("\n") >= 3

    argv = _run_argv(tiny_qwen_image_path, fast_overrides, tmp_path)
    code, lines, sent_at, sid = _interrupt(argv, tmp_path, third_step_logged)
    line = _check_interrupted(code, lines, sent_at, sid, before)
    latest = CheckpointManager(tmp_path / "ckpt").latest()
    assert latest is not None and f"last checkpoint: {latest} (step " in line, line
    assert re.search(r"interrupted after step [34];", line), line
    # the quickstart resumes by default (trainer.resume_mode=auto): the resume command is the command itself
    assert shlex.split(line.split("resume: ", 1)[1]) == ["verl-omni-train", *argv[len(_MODULE) :]]
    rows = _resume_from_line(line, tmp_path)
    step = int(latest.name.rpartition("_")[2])
    assert [r["step"] for r in rows][-1] == step + 1


def test_ctrl_c_during_a_checkpoint_save_keeps_the_last_complete_one(tiny_qwen_image_path, fast_overrides, tmp_path):
    before = _segments()
    ckpt = tmp_path / "ckpt"

    def saving_step_4(_lines: list[str]) -> bool:  # the save writes into a hidden temporary folder first
        return ckpt.is_dir() and any(p.name.startswith(".global_step_4.") for p in ckpt.iterdir())

    argv = _run_argv(tiny_qwen_image_path, fast_overrides, tmp_path)
    code, lines, sent_at, sid = _interrupt(argv, tmp_path, saving_step_4)
    line = _check_interrupted(code, lines, sent_at, sid, before)
    latest = CheckpointManager(ckpt).latest()
    assert latest is not None and latest.name in ("global_step_2", "global_step_4") and str(latest) in line, line
    rows = _resume_from_line(line, tmp_path)
    assert rows[-1]["step"] == int(latest.name.rpartition("_")[2]) + 1
