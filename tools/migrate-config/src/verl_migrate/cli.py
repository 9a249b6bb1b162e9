"""Command line of `verl-migrate-config` (the migration itself is not implemented yet)."""

from __future__ import annotations

import argparse
import sys

_NOT_IMPLEMENTED = (
    "verl-migrate-config: not implemented yet. This release only reserves the command; the config "
    "migration lands with the verl-migrate-config issue. Nothing was read or written."
)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser (its help states that migration is not implemented yet)."""
    parser = argparse.ArgumentParser(
        prog="verl-migrate-config",
        description=(
            "Rewrite pre-#6200 verl diffusion Hydra configs and launch scripts to the verl-omni schema. "
            "NOT IMPLEMENTED YET: every invocation other than --help exits with status 2."
        ),
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="YAML configs or launch scripts to migrate")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv`, print the not-implemented notice to stderr and return 2."""
    build_parser().parse_args(argv)
    print(_NOT_IMPLEMENTED, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
