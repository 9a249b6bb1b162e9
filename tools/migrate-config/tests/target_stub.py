"""A stand-in for the target's Hydra config folder, written from the key tree and `verl_migrate.target`.

Until this project's trainer ships `verl_omni/trainer/config/diffusion_trainer.yaml`, tests compose migrated files
with this folder: a root `diffusion_trainer.yaml` (the target's defaults list and root keys) and one file per group
option it composes, each holding the key tree's subtree of that package.
"""

from __future__ import annotations

import os

from verl_migrate import target
from verl_migrate.keys import head_defaults


def _emit(tree: dict, lines: list[str], ind: int) -> None:
    for key, value in tree.items():
        if isinstance(value, dict):
            lines.append(" " * ind + f"'{key}':")
            _emit(value, lines, ind + 2)
        else:
            text = value if value != "" else "''"
            if text.startswith("${"):
                text = "'" + text + "'"
            lines.append(" " * ind + f"'{key}': {text}")


def _tree(prefix: str, keys: list[str]) -> dict:
    tree: dict = {}
    for key in keys:
        node = tree
        *parents, leaf = key[len(prefix) :].split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = head_defaults()[key]
    return tree


def write_target_config(folder: str) -> str:
    """Write the stand-in config folder under `folder`; return its path."""
    root = os.path.join(folder, "target_config")
    os.makedirs(root, exist_ok=True)
    open(os.path.join(root, "__init__.py"), "w").close()
    engine = "dp_diffusion"
    lines = ["defaults:"]
    for group, package, option in target.ROOT_DEFAULTS:
        lines.append(f"  - {group}@{package}: {option}" if package else f"  - {group}: {option}")
        name = option.replace("${diffusion/model_engine}", engine)
        path = os.path.join(root, group, f"{name}.yaml")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        body: list[str] = []
        if package:
            _emit(_tree(package + ".", [k for k in head_defaults() if k.startswith(package + ".")]), body, 0)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("\n".join(body) + "\n" if body else "# @package _global_\n{}\n")
    lines.append("  - _self_")
    _emit(_tree("", list(target.root_keys())), lines, 0)
    with open(os.path.join(root, f"{target.CONFIG_NAME}.yaml"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return root
