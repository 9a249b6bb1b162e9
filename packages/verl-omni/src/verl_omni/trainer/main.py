"""`verl-omni-train` (= `python -m verl_omni.trainer.main`): FlowGRPO training from the `diffusion_trainer` config.

    verl-omni-train                                    # no arguments: the built-in quickstart (config `quickstart`)
    verl-omni-train [--config-path DIR] [--config-name NAME] [--cfg] [key=value ...]

Overrides use Hydra's syntax. The config is checked completely, and the model folder, prompt files and trackers
are looked at, before Ray or any worker starts; a bad config exits with status 2 in seconds, naming the key or the
path. A failure during training exits with status 1; the last checkpoint stays intact.
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys
from collections.abc import Sequence

__all__ = ["EXIT_CONFIG", "EXIT_FAILED", "main", "parse_args", "run"]

EXIT_CONFIG = 2
EXIT_FAILED = 1

logger = logging.getLogger("verl_omni.trainer")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse `--config-path`, `--config-name`, `--cfg` and the Hydra overrides; no arguments = the quickstart."""
    parser = argparse.ArgumentParser(
        prog="verl-omni-train",
        description="FlowGRPO training of a diffusers model (verl-omni). No arguments: the built-in quickstart.",
    )
    parser.add_argument("--config-path", "-cp", default=None, help="folder of your config (default: the shipped ones)")
    parser.add_argument("--config-name", "-cn", default=None, help="config name (default: diffusion_trainer)")
    parser.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.total_training_steps=3")
    args = parser.parse_args(list(argv))
    if args.config_name is None:
        args.config_name = "quickstart" if not argv else "diffusion_trainer"
    return args


def run(argv: Sequence[str]) -> int:
    """Run `verl-omni-train` with `argv` (without the program name); return the exit status."""
    from verl_core.config import ConfigError

    args = parse_args(argv)
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
    except (ConfigError, FileNotFoundError, ImportError, AttributeError, ValueError, TypeError, KeyError) as e:
        print(f"verl-omni-train: config error: {e}", file=sys.stderr)
        return EXIT_CONFIG

    # 2. workers, then the recipe: setup -> train -> cleanup
    from tqdm.auto import tqdm

    from verl_omni.trainer.components import build_components
    from verl_omni.trainer.flow_grpo_trainer import FlowGRPOTrainer
    from verl_omni.trainer.report import learning_margin, read_metrics, write_reward_curve, write_sample_grid

    trainer = FlowGRPOTrainer(prepared.config)
    stage = "during setup"
    try:
        trainer.setup(build_components(prepared, write=tqdm.write))
        stage = ""
        trainer.train()
    except KeyboardInterrupt:
        print("verl-omni-train: interrupted", file=sys.stderr)
        return EXIT_FAILED
    except Exception as e:
        logger.debug("training failed", exc_info=True)
        where = stage or f"at step {trainer.step + 1}"
        print(f"verl-omni-train: error {where}: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        trainer.cleanup()

    # 3. artifacts
    run_dir = pathlib.Path(prepared.config.trainer.run_dir)
    rows = read_metrics(run_dir / "metrics.jsonl")
    print(f"metrics: {run_dir / 'metrics.jsonl'}")
    print(f"reward curve: {write_reward_curve(rows, run_dir / 'reward_curve.png')}")
    grid = write_sample_grid(trainer.val_images, run_dir / "samples_first_last.png")
    if grid is not None:
        print(f"samples (top: first validation, bottom: last): {grid}")
    margin = learning_margin(rows)
    if margin is not None:
        print(
            f"mean reward, last 3 steps vs first 3: {margin['last']:+.5f} vs {margin['first']:+.5f} "
            f"(diff {margin['diff']:+.5f} = {margin['margin']:.1f} standard errors)"
        )
    return 0


def main() -> None:
    """Console entry point of `verl-omni-train`."""
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
