"""`verl-omni-train` (= `python -m verl_omni.trainer.main`): FlowGRPO training; config `quickstart` unless named.

    verl-omni-train [key=value ...]                    # the built-in quickstart (config `quickstart`), overrides on top
    verl-omni-train --config-name diffusion_trainer actor_rollout_ref.model.path=DIR [key=value ...]   # full recipe
    verl-omni-train [--config-path DIR] [--config-name NAME] [--cfg] [key=value ...]

The config is chosen by `--config-name` alone, never by whether overrides are given: `verl-omni-train` uses
`quickstart`, `python -m verl_omni.trainer.main_diffusion` (upstream verl-omni's module; migrated launch scripts and
`python -m verl.trainer.main_flowgrpo` run it) uses `diffusion_trainer`. Overrides use Hydra's syntax.

The config is checked completely, and the model folder, prompt files and trackers are looked at, before Ray or any
worker starts; a bad config exits with status 2 in seconds, naming the key or the path (a missing model also names
the config in use and the command that selects the other one). A failure during training exits with status 1, its
full traceback (a worker's remote one included) in `<trainer.run_dir>/error.log`; the last checkpoint stays intact.
Ctrl-C (SIGINT) stops the workers and Ray, prints one line with the last checkpoint and the command that resumes
from it, and exits with status 130. Every finished run prints that command too.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import pathlib
import shlex
import signal
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "FULL_RECIPE",
    "QUICKSTART",
    "main",
    "parse_args",
    "resume_command",
    "run",
]

EXIT_CONFIG = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
QUICKSTART = "quickstart"  # `verl-omni-train`'s config
FULL_RECIPE = "diffusion_trainer"  # `python -m verl_omni.trainer.main_diffusion`'s config
COMMAND = ("verl-omni-train",)
_RESUME_KEYS = ("trainer.resume_mode=", "trainer.resume_from_path=")

logger = logging.getLogger("verl_omni.trainer")


def parse_args(
    argv: Sequence[str], *, default_config: str = QUICKSTART, prog: str = "verl-omni-train"
) -> argparse.Namespace:
    """Parse `--config-path`, `--config-name`, `--cfg` and the Hydra overrides.

    Args:
        argv (`Sequence[str]`): the arguments, without the program name.
        default_config (`str`, *optional*, defaults to `"quickstart"`): the config without `--config-name`, whether
            or not overrides are given.
        prog (`str`, *optional*): the command's name in `--help`.
    """
    other = FULL_RECIPE if default_config == QUICKSTART else QUICKSTART
    parser = argparse.ArgumentParser(
        prog=prog,
        description=f"FlowGRPO training of a diffusers model (verl-omni) on the config `{default_config}` unless "
        f"--config-name names another (`--config-name {other}`).",
    )
    parser.add_argument("--config-path", "-cp", default=None, help="folder of your config (default: the shipped ones)")
    parser.add_argument(
        "--config-name", "-cn", default=default_config, help=f"config name (default: {default_config}, always)"
    )
    parser.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.total_training_steps=3")
    return parser.parse_args(list(argv))


def resume_command(
    command: Sequence[str], argv: Sequence[str], resume_mode: str, total_steps: int | None = None
) -> str:
    """The shell command that resumes a run started with `command` + `argv`.

    `trainer.resume_mode=auto` is added unless the config resumes already, and, given `total_steps`,
    `trainer.total_training_steps=total_steps` (earlier values of both keys are dropped).
    """
    words = list(argv)
    if resume_mode != "auto":
        words = [w for w in words if not w.lstrip("+").startswith(_RESUME_KEYS)] + ["trainer.resume_mode=auto"]
    if total_steps is not None:
        words = [w for w in words if not w.lstrip("+").startswith("trainer.total_training_steps=")]
        words.append(f"trainer.total_training_steps={total_steps}")
    return shlex.join([*command, *words])


def _other_config_hint(args: argparse.Namespace, command: Sequence[str]) -> str:
    """Which config this command used and the command that selects the other shipped one."""
    cmd = " ".join(command)
    where = f" from {args.config_path}" if args.config_path else ""
    if args.config_name.removesuffix(".yaml") == QUICKSTART and not args.config_path:
        other = f"`{cmd} --config-name {FULL_RECIPE} actor_rollout_ref.model.path=<folder>` selects the full recipe"
    else:
        other = f"`{cmd} --config-name {QUICKSTART}` selects the built-in quickstart (a tiny random model, no download)"
    return f"This command uses the config `{args.config_name}`{where}; {other}"


def run(argv: Sequence[str], *, default_config: str = QUICKSTART, command: Sequence[str] = COMMAND) -> int:
    """Run `verl-omni-train` with `argv` (without the program name); return the exit status.

    Args:
        argv (`Sequence[str]`): flags and overrides.
        default_config (`str`, *optional*, defaults to `"quickstart"`): the config without `--config-name`.
        command (`Sequence[str]`, *optional*): the words that start this command, for the printed resume command.
    """
    from verl_core.config import ConfigError
    from verl_omni.trainer.components import ModelPathError

    args = parse_args(argv, default_config=default_config, prog=" ".join(command))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for chatty in ("httpx", "httpcore"):  # one INFO line per rollout request would bury the per-step metrics line
        logging.getLogger(chatty).setLevel(logging.WARNING)

    # 1. config and pre-flight checks: no Ray, no worker
    try:
        from verl_omni.trainer.components import preflight
        from verl_omni.trainer.config import compose_config, load_config

        if args.cfg:
            from omegaconf import OmegaConf

            cfg = compose_config(args.overrides, config_name=args.config_name, config_dir=args.config_path)
            print(OmegaConf.to_yaml(cfg))
            return 0
        config = load_config(args.overrides, config_name=args.config_name, config_dir=args.config_path)
        prepared = preflight(config)
    except ModelPathError as e:
        print(f"verl-omni-train: config error: {e}. {_other_config_hint(args, command)}.", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        print("verl-omni-train: interrupted while checking the config; nothing was started", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ConfigError, FileNotFoundError, ImportError, AttributeError, ValueError, TypeError, KeyError) as e:
        print(f"verl-omni-train: config error: {e}", file=sys.stderr)
        return EXIT_CONFIG

    # 2. workers, then the recipe: setup -> train -> cleanup
    from tqdm.auto import tqdm

    from verl_omni.trainer.checkpoint import CheckpointManager
    from verl_omni.trainer.components import build_components
    from verl_omni.trainer.flow_grpo_trainer import FlowGRPOTrainer
    from verl_omni.trainer.report import (
        learning_margin,
        load_val_images,
        read_metrics,
        write_reward_curve,
        write_sample_grid,
    )

    trainer_cfg = prepared.config.trainer
    _set_aside_error_log(pathlib.Path(trainer_cfg.run_dir))
    checkpoints = CheckpointManager(trainer_cfg.default_local_dir)
    trainer = FlowGRPOTrainer(prepared.config)
    stage, interrupted = "during setup", False
    try:
        trainer.setup(build_components(prepared, write=tqdm.write))
        stage = ""
        trainer.train()
    except KeyboardInterrupt:
        interrupted = True
    except Exception as e:
        where = stage or f"at step {trainer.step + 1}"
        saved = _write_error_log(pathlib.Path(trainer_cfg.run_dir), e, where)
        print(f"verl-omni-train: error {where}: {type(e).__name__}: {e} {saved}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        # after a Ctrl-C the workers' shared memory and Ray must go: a second one does not cut the cleanup short
        with _sigint_ignored() if interrupted else contextlib.nullcontext():
            trainer.cleanup()
    if interrupted:
        where = stage or f"after step {trainer.step}"
        print(f"verl-omni-train: interrupted {where}; {_resume_line(checkpoints, command, argv, trainer_cfg)}",
              file=sys.stderr)  # fmt: skip
        return EXIT_INTERRUPTED

    # 3. artifacts
    run_dir = pathlib.Path(trainer_cfg.run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    print(f"metrics: {run_dir / 'metrics.jsonl'}")
    print(f"reward curve: {write_reward_curve(rows, run_dir / 'reward_curve.png', title=trainer.loss_mode)}")
    val_images = {s: v for s, v in load_val_images(run_dir).items() if s <= trainer.step} | trainer.val_images
    grid = write_sample_grid(val_images, run_dir / "samples_first_last.png")
    if grid is not None:
        first, last = min(val_images), max(val_images)
        print(f"samples (top: validation at step {first}, bottom: step {last}): {grid}")
    margin = learning_margin(rows)
    if margin is not None:
        print(
            f"mean reward, last 3 steps vs first 3: {margin['last']:+.5f} vs {margin['first']:+.5f} "
            f"(diff {margin['diff']:+.5f} = {margin['margin']:.1f} standard errors)"
        )
    print(_resume_line(checkpoints, command, argv, trainer_cfg, finished_at=trainer.step))
    return 0


def _resume_line(
    checkpoints: Any, command: Sequence[str], argv: Sequence[str], trainer_cfg: Any, finished_at: int | None = None
) -> str:
    """`last checkpoint: ...; resume: <command>` (after a finished run: the command that trains on from it)."""
    latest = checkpoints.latest()
    if latest is None:
        why = " (trainer.save_freq <= 0)" if trainer_cfg.save_freq <= 0 else ""
        rerun = shlex.join([*command, *argv])
        return f"no checkpoint saved{why}; start again: {rerun}"
    step = int(latest.name.rpartition("_")[2])
    if finished_at is None:
        resume = resume_command(command, argv, trainer_cfg.resume_mode)
        return f"last checkpoint: {latest} (step {step}); resume: {resume}"
    more = resume_command(command, argv, trainer_cfg.resume_mode, total_steps=2 * max(finished_at, 1))
    return f"last checkpoint: {latest} (step {step}); to train on from it: {more}"


def _set_aside_error_log(run_dir: pathlib.Path) -> None:
    """Rename an earlier run's `run_dir/error.log` to `error.previous.log` (replacing an older one) and say so.

    A run folder then never shows an error this run did not have; the earlier traceback is kept, not deleted.
    A folder that cannot be changed is left as it is, with a warning.
    """
    stale = run_dir / "error.log"
    if not stale.is_file():
        return
    kept = run_dir / "error.previous.log"
    try:
        stale.replace(kept)
    except OSError as e:
        logger.warning("cannot rename the earlier run's %s to %s: %s", stale, kept.name, e.strerror or e)
        return
    logger.info("the earlier run's error.log in %s is now %s", run_dir, kept.name)


def _write_error_log(run_dir: pathlib.Path, error: BaseException, where: str) -> str:
    """Write `error`'s full traceback (chained causes included) to `run_dir/error.log`; say where it is.

    Returns:
        `(full traceback: <path>)`, or, when the run folder cannot be written, a note saying so after the
        traceback has been printed to stderr instead (never lost).
    """
    text = "".join(traceback.format_exception(error))
    path = run_dir / "error.log"
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(f"verl-omni-train: error {where}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n{text}")
    except OSError as e:
        print(text, file=sys.stderr, end="")
        return f"(full traceback above: cannot write {path}: {e.strerror or e})"
    return f"(full traceback: {path})"


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT inside the block (main thread only; elsewhere a no-op)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def main() -> None:
    """Console entry point of `verl-omni-train`."""
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
