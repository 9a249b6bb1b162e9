"""Command line of `verl-migrate-config` (argparse only at start-up; the migration modules load on demand).

Exit codes: 0 nothing to do or done; 1 `--check` found a file that would change, or `--validate` found errors;
2 input errors (invalid YAML, unreadable/binary/non-UTF-8 files, conflicting keys, symlink loops, bad options,
outputs that cannot be written).
"""

from __future__ import annotations

import argparse
import sys

from verl_migrate.errors import EXIT_CHANGED, EXIT_INPUT, EXIT_OK

__all__ = ["EXIT_CHANGED", "EXIT_INPUT", "EXIT_OK", "build_parser", "main"]

_EPILOG = """\
exit codes:
  0  nothing to do, or done
  1  --check: at least one file would change; --validate: errors found
  2  input error: invalid YAML (file:line:column), root not a mapping, duplicate keys, binary,
     non-UTF-8 or unreadable file, symlink loop, output/backup/report file not writable,
     old and new key both set, unknown rule id

examples:
  verl-migrate-config old.yaml > new.yaml
  verl-migrate-config -i --report text configs/ examples/run_qwen_image_ocr_lora.sh
  verl-migrate-config --check configs/          # CI / pre-commit
"""


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser."""
    p = argparse.ArgumentParser(
        prog="verl-migrate-config",
        description="Rewrite pre-#6200 verl diffusion Hydra configs and launch scripts to the verl-omni schema.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "paths", nargs="*", metavar="PATH", help="YAML configs, launch scripts, or folders to walk ('-': stdin)"
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", metavar="OUT", help="write the migrated file to OUT (one input only)")
    out.add_argument("-i", "--in-place", action="store_true", help="rewrite files atomically, keeping PATH.bak")
    out.add_argument("--diff", action="store_true", help="print a unified diff instead of the migrated text")
    out.add_argument("--check", action="store_true", help="exit 1 if any file would change; write nothing")
    p.add_argument("--no-backup", action="store_true", help="with -i: do not keep PATH.bak")
    p.add_argument("--script", action="store_true", help="treat every PATH as a launch script")
    p.add_argument(
        "--imports", action="store_true", help="treat every PATH as Python code: rewrite old verl.* diffusion imports"
    )
    p.add_argument(
        "--package",
        metavar="PKG",
        help="the YAML files are config-group files for this package, e.g. actor_rollout_ref.rollout "
        "(default: a `# @package` header, else the file's folder when it is named after a config group, "
        "e.g. model/ or rollout/, else the config root)",
    )
    p.add_argument("--report", choices=("text", "json"), help="print every change, unknown key and semantic change")
    p.add_argument("--report-file", metavar="FILE", help="write the report to FILE instead of stderr")
    p.add_argument("--validate", action="store_true", help="check the result against verl-omni's config")
    p.add_argument("--only", action="append", default=[], metavar="ID", help="apply only these rule ids")
    p.add_argument("--skip", action="append", default=[], metavar="ID", help="do not apply these rule ids")
    p.add_argument("--list-rules", action="store_true", help="list the rule ids and exit")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = build_parser().parse_args(argv)
    if args.version:
        import verl_migrate

        print(f"verl-migrate-config {verl_migrate.__version__}")
        return EXIT_OK
    if args.list_rules:
        from verl_migrate.rules import all_rules

        for r in all_rules():
            print(f"{r.id:<42} {r.kind:<21} since {r.since:<6} {r.summary}")
        return EXIT_OK
    if args.imports:
        from verl_migrate.imports_rewrite import run

        return run(args)
    from verl_migrate.runner import Runner

    try:
        return Runner(args).run()
    except BrokenPipeError:  # the reader went away (`... | head`): no traceback, and no flush error at exit
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CHANGED


if __name__ == "__main__":
    sys.exit(main())
