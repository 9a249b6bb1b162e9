"""What a person sees from `verl-omni-train`: the help alone, one short line per step, no other library's noise."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from verl_omni import log_filters

NOISE_TEXT = ("requires torchvision (not installed)", "Token authentication is enabled for this Ray cluster")
"""What the run must not print (the messages `log_filters` drops)."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "RAY_AUTH_MODE")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_help_prints_the_usage_and_nothing_else(tmp_path):
    cmd = [sys.executable, "-m", "verl_omni.trainer.main", "--help"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: ") and "overrides" in proc.stdout
    assert proc.stderr == ""


@pytest.mark.parametrize(
    ("name", "noise", "kept"),
    [
        pytest.param(
            "transformers.utils.import_utils",
            "`CLIPImageProcessor` requires torchvision (not installed); falling back to `CLIPImageProcessorPil` for "
            "backward compatibility.",
            "Could not load PIL fallback CLIPImageProcessorPil",
            id="transformers",
        ),
        pytest.param(
            "ray._private.authentication.authentication_token_setup",
            "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.",
            "Token authentication is disabled for this Ray cluster. Anyone with network access can run code.",
            id="ray",
        ),
    ],
)
def test_log_filters_drop_only_the_noise(name, noise, kept):
    assert name in log_filters.NOISE
    log_filters.install()
    log_filters.install()  # idempotent: one filter per logger
    logger = logging.getLogger(name)
    assert sum(isinstance(f, log_filters.MessageFilter) for f in logger.filters) == 1
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger.addHandler(handler)
    level, disabled = logger.level, logger.disabled
    logger.setLevel(logging.WARNING)  # other tests may have quietened the library's loggers (set_verbosity_error)
    logger.disabled = False
    try:
        logger.warning(noise)
        logger.warning(kept)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.disabled = disabled
    assert seen == [kept]


@pytest.mark.ray
@pytest.mark.slow
def test_a_run_prints_short_step_lines_and_no_library_noise(tiny_qwen_image_path, fast_overrides, tmp_path):
    cmd = [
        sys.executable, "-m", "verl_omni.trainer.main", "--config-name", "quickstart",
        f"actor_rollout_ref.model.path={tiny_qwen_image_path}", *fast_overrides, "trainer.val_before_train=false",
        f"trainer.run_dir={tmp_path / 'run'}", f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.total_training_steps=1",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.startswith("step 1 | reward "), proc.stdout
    assert " | clipfrac " in proc.stdout and " | img/s " in proc.stdout and "pg_loss" not in proc.stdout
    for text in NOISE_TEXT:
        assert text not in proc.stderr, proc.stderr[-4000:]


def _raise_chained() -> None:
    try:
        raise KeyError("inner cause")
    except KeyError as e:
        raise RuntimeError("outer") from e


def test_a_failed_runs_traceback_goes_to_the_run_folder_or_else_to_stderr(tmp_path, capsys):
    from verl_omni.trainer.main import _write_error_log

    try:
        _raise_chained()
    except RuntimeError as e:
        error = e
    run_dir = tmp_path / "new" / "run"
    assert _write_error_log(run_dir, error, "at step 3") == f"(full traceback: {run_dir / 'error.log'})"
    text = (run_dir / "error.log").read_text()
    assert text.startswith("verl-omni-train: error at step 3, ") and "KeyError: 'inner cause'" in text
    assert "direct cause of the following exception" in text and text.rstrip().endswith("RuntimeError: outer")
    assert capsys.readouterr().err == ""
    # a run folder that cannot be written (here: below a file): the traceback is printed instead, never lost
    (tmp_path / "file").write_text("")
    note = _write_error_log(tmp_path / "file" / "run", error, "at step 3")
    assert note.startswith(f"(full traceback above: cannot write {tmp_path / 'file' / 'run' / 'error.log'}: ")
    err = capsys.readouterr().err
    assert "KeyError: 'inner cause'" in err and err.rstrip().endswith("RuntimeError: outer")


def test_an_earlier_runs_error_log_is_set_aside_not_left_as_current(tmp_path):
    from verl_omni.trainer.main import _set_aside_error_log

    _set_aside_error_log(tmp_path / "missing")  # no folder, no error.log: nothing to do
    assert not (tmp_path / "missing").exists()
    (tmp_path / "error.previous.log").write_text("older\n")
    (tmp_path / "error.log").write_text("earlier\n")
    _set_aside_error_log(tmp_path)
    assert not (tmp_path / "error.log").exists()
    assert (tmp_path / "error.previous.log").read_text() == "earlier\n"  # the latest earlier error is kept
