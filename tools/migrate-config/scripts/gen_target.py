"""Describe the installed target config for `verl_migrate/target.py` and rewrite the key tree the tool ships.

Run it once this project's trainer ships `verl_omni/trainer/config/diffusion_trainer.yaml` (or pass a config folder):

    python tools/migrate-config/scripts/gen_target.py [--config-dir DIR] [--write]

It composes the root config with Hydra and prints the `ROOT_DEFAULTS` and `GROUP_OPTIONS` to put in
`verl_migrate/target.py`; with `--write` it also rewrites `data/verl_omni_diffusion_trainer.flat.txt` from the
composition. Review the diff, then run the tests (`test_target.py` compares target.py with the installed config).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FLAT = os.path.join(HERE, "..", "src", "verl_migrate", "data", "verl_omni_diffusion_trainer.flat.txt")


def flat_lines(cfg) -> list[str]:
    """Return `key = default` lines of a composed config, values unresolved (interpolations as written)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    out: list[str] = []

    def walk(node, prefix: str) -> None:
        for key in node:
            path = f"{prefix}.{key}" if prefix else str(key)
            if OmegaConf.is_missing(node, key):
                out.append(f"{path} = ???")
                continue
            child = node._get_node(key)
            if OmegaConf.is_interpolation(node, key):
                out.append(f"{path} = {child._value()}")
            elif isinstance(child, DictConfig) and not child._is_none() and len(child):
                walk(child, path)
            elif isinstance(child, (DictConfig, ListConfig)) and not child._is_none():
                out.append(f"{path} = {json.dumps(OmegaConf.to_container(child, resolve=False))}")
            else:
                value = child._value()
                text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
                out.append(f"{path} = {text}")

    walk(cfg, "")
    return out


def describe(folder: str) -> tuple[list[tuple[str, str | None, str]], dict[str, list[str]]]:
    """Return the root defaults list and the options of every group folder under `folder`."""
    from ruamel.yaml import YAML

    from verl_migrate.target import CONFIG_NAME

    with open(os.path.join(folder, f"{CONFIG_NAME}.yaml"), encoding="utf-8") as fh:
        root = YAML(typ="safe").load(fh)
    defaults = []
    for item in root.get("defaults", []):
        if isinstance(item, dict):
            ((name, option),) = item.items()
            group, _, package = str(name).partition("@")
            defaults.append((group, package or None, str(option)))
    groups: dict[str, list[str]] = {}
    for dirpath, _, names in os.walk(folder):
        rel = os.path.relpath(dirpath, folder)
        options = sorted(n[:-5] for n in names if n.endswith(".yaml"))
        if rel != "." and options:
            groups[rel.replace(os.sep, "/")] = options
    return defaults, groups


def main(argv: list[str] | None = None) -> int:
    """Print the target description; with `--write`, rewrite the key tree."""
    from hydra import compose, initialize_config_dir

    from verl_migrate.target import CONFIG_NAME
    from verl_migrate.validate import omni_config_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-dir", help="the target's Hydra config folder (default: the installed one)")
    parser.add_argument("--write", action="store_true", help="rewrite the key tree the tool ships")
    args = parser.parse_args(argv)
    folder = args.config_dir or omni_config_dir()
    if folder is None:
        print("no installed verl_omni/trainer/config/diffusion_trainer.yaml; pass --config-dir", file=sys.stderr)
        return 2
    defaults, groups = describe(folder)
    print("ROOT_DEFAULTS = (")
    for entry in defaults:
        print(f"    {entry!r},")
    print(")\nGROUP_OPTIONS = {")
    for group, options in sorted(groups.items()):
        print(f"    {group!r}: {tuple(options)!r},")
    print("}")
    if args.write:
        with initialize_config_dir(config_dir=os.path.abspath(folder), version_base=None):
            cfg = compose(CONFIG_NAME)
        with open(FLAT, "w", encoding="utf-8") as fh:
            fh.write(f"# Flattened key=default list of {folder}/{CONFIG_NAME}.yaml, composed by gen_target.py.\n")
            fh.write("\n".join(flat_lines(cfg)) + "\n")
        print(f"wrote {FLAT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
