"""Config-group files: finding the Hydra package their keys live under.

A group file (verl's `model/diffusion_model.yaml`, composed as `model@actor_rollout_ref.model`) holds the keys of
one node. Its package comes from `--package`, a `# @package` header, or its place: the folder it sits in is an old
(or verl-omni) config group. A file that looks like a group file but has none of these is refused, naming the
`--package` to pass, rather than half-migrated as if it were a root config.
"""

from __future__ import annotations

import os
from typing import Any

from verl_migrate import target
from verl_migrate.errors import MigrationError
from verl_migrate.keys import head_defaults, old_defaults

#: verl's config groups before #6200 and the package its diffusion_trainer composed each at
OLD_GROUP_PACKAGES = {
    "model": "actor_rollout_ref.model",
    "rollout": "actor_rollout_ref.rollout",
    "actor": "actor_rollout_ref.actor",
    "ref": "actor_rollout_ref.ref",
    "critic": "critic",
    "data": "data",
    "reward": "reward",
}


def package_header(text: str) -> str | None:
    """Return the package of a `# @package a.b` header (Hydra's `_global_` / `_group_` give None)."""
    for line in text.splitlines()[:20]:
        stripped = line.strip()
        if stripped.startswith("# @package "):
            pkg = stripped[len("# @package ") :].strip()
            return None if pkg.startswith("_") else pkg
        if stripped and not stripped.startswith("#"):
            break
    return None


def _top_names() -> frozenset[str]:
    return frozenset(k.split(".")[0] for k in (*old_defaults(), *head_defaults())) | {"defaults", "hydra"}


def _packages() -> dict[str, str]:
    """Return folder name (`model`, `diffusion/model`) -> package, for old verl's groups and the target's."""
    out = dict(OLD_GROUP_PACKAGES)
    for group, package, _ in target.ROOT_DEFAULTS:
        if package:
            out[group] = package
    return out


def package_from_place(path: str, data: Any) -> str | None:
    """Return the package the folder of `path` implies (`.../config/model/x.yaml` -> `actor_rollout_ref.model`).

    Only for a file whose top-level keys are not those of a root config.
    """
    if not path or path.startswith("<") or path == "-" or not isinstance(data, dict):
        return None
    if set(map(str, data)) & (_top_names() - {"defaults"}):
        return None
    folders = os.path.normpath(os.path.dirname(os.path.abspath(path))).split(os.sep)
    packages = _packages()
    for depth in (2, 1):
        name = "/".join(folders[-depth:])
        if name in packages:
            return packages[name]
    return None


def guess_package(data: Any) -> str | None:
    """Return the package whose keys the top-level keys of `data` are, when it does not look like a root config."""
    if not isinstance(data, dict):
        return None
    top = {str(k) for k in data} - {"defaults"}
    if not top or top & _top_names():
        return None
    best, score = None, 0
    for package in dict.fromkeys(_packages().values()):
        children = {
            k[len(package) + 1 :].split(".")[0]
            for k in (*old_defaults(), *head_defaults())
            if k.startswith(package + ".")
        }
        hits = len(top & children)
        if hits > score:
            best, score = package, hits
    return best


def resolve_package(text: str, path: str, data: Any, package: str | None) -> tuple[str, str]:
    """Return `(package, how)` for a YAML file: `("", "")` for a root or partial config.

    Raises:
        MigrationError: the file looks like a config-group file but no package is given or implied.
    """
    if package:
        return package, "--package"
    header = package_header(text)
    if header:
        return header, "its `# @package` header"
    placed = package_from_place(path, data)
    if placed:
        return placed, "its folder"
    guess = guess_package(data)
    if guess:
        keys = ", ".join(f"`{k}`" for k in list(data)[:3])
        raise MigrationError(
            f"looks like a config-group file (top-level keys {keys} are keys of `{guess}`), but neither "
            f"`--package`, a `# @package` header nor its folder says where it goes; pass `--package {guess}` "
            f"(or add `# @package {guess}` as its first line)",
            path=path,
        )
    return "", ""
