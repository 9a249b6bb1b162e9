"""`--validate` with the target's Hydra config: compose the migrated file with it and report problems by key.

A root config (or one layered on the target's root) is composed as Hydra's primary config next to a copy of the
target's config folder, so its defaults list resolves against the target's groups. Then every key is resolved
(`${...}` interpolations included) and the composed key set is compared with the target's own composition: a key
the target defines but the migrated config lacks, or one the target does not know, is an error. A config-group file
replaces the target's option of its group; launch-script overrides are applied to the target's root. Needs
hydra-core (verl-omni depends on it); imported only by `--validate`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from verl_migrate import target

#: name the migrated file gets in the temporary config folder
_NAME = "verl_migrate_candidate"


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Return `dotted.key -> value node` for every leaf of an OmegaConf container (values not resolved)."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    out: dict[str, Any] = {}
    if isinstance(node, DictConfig):
        if len(node) == 0 and prefix:
            out[prefix] = node
        for key in node:
            sub = f"{prefix}.{key}" if prefix else str(key)
            if OmegaConf.is_missing(node, key) or OmegaConf.is_interpolation(node, key):
                out[sub] = None
                continue
            child = node._get_node(key)
            if isinstance(child, (DictConfig, ListConfig)) and not child._is_none():
                if isinstance(child, ListConfig):
                    out[sub] = child
                else:
                    out.update(_flatten(child, sub))
            else:
                out[sub] = child
    return out


def _problems(cfg: Any, reference: Any) -> list[tuple[str, str]]:
    """Return `(key, problem)` for keys that do not resolve, are missing against `reference`, or are unknown to it."""
    from omegaconf import OmegaConf

    found: list[tuple[str, str]] = []
    mine, theirs = _flatten(cfg), _flatten(reference)
    try:
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except Exception as whole:  # some interpolation fails: find which, key by key
        for key in mine:
            try:
                OmegaConf.select(cfg, key, throw_on_resolution_failure=True, throw_on_missing=False)
            except Exception as e:  # omegaconf raises several error types; each is reported by key
                found.append((key, f"does not resolve: {_first_line(e)}"))
        if not found:  # no single key fails alone: report the error of the whole config
            found.append(("<config>", f"does not resolve: {_first_line(whole)}"))
    for key in theirs:
        if key not in mine and not any(key.startswith(m + ".") or m.startswith(key + ".") for m in mine):
            found.append((key, "missing: verl-omni's config defines it, so its trainer may read it"))
    for key in mine:
        if key not in theirs and not any(key.startswith(t + ".") for t in theirs) and not _dataclass_only(key):
            found.append((key, "not a key of verl-omni's config"))
    return found


def _dataclass_only(key: str) -> bool:
    """Return whether `key` is a field verl-omni's config classes accept although its YAML does not list it."""
    from verl_migrate.keys import is_head_key, is_head_yaml_key

    return is_head_key(key) and not is_head_yaml_key(key)


class Composer:
    """A temporary copy of the target's config folder that migrated files are composed in."""

    def __init__(self, folder: str):
        """Copy `folder` (the target's Hydra config folder) to a temporary folder."""
        self._tmp = tempfile.mkdtemp(prefix="verl_migrate_compose_")
        self.folder = os.path.join(self._tmp, "config")
        shutil.copytree(folder, self.folder)
        self._reference: Any = None

    def close(self) -> None:
        """Remove the temporary folder."""
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> Composer:
        """Return self."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Remove the temporary folder."""
        self.close()

    def _compose(self, name: str, overrides: list[str] | None = None) -> Any:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=self.folder, version_base=None):
            return compose(name, overrides=list(overrides or ()))

    def reference(self) -> Any:
        """Return the target's own root config, composed (once)."""
        if self._reference is None:
            self._reference = self._compose(target.CONFIG_NAME)
        return self._reference

    def compose(self, overrides: list[str]) -> Any:
        """Return the target's root config composed with `overrides` (Hydra's errors propagate)."""
        return self._compose(target.CONFIG_NAME, overrides)

    def root(self, text: str) -> list[tuple[str, str]]:
        """Compose `text` as the primary config; return `(key, problem)` pairs (`defaults` for composition errors)."""
        with open(os.path.join(self.folder, f"{_NAME}.yaml"), "w", encoding="utf-8") as fh:
            fh.write(text)
        try:
            cfg = self._compose(_NAME)
        except Exception as e:  # Hydra's composition errors name the group or option that failed
            return [("defaults", f"Hydra cannot compose it: {_first_line(e)}")]
        return _problems(cfg, self.reference())

    def group_file(self, text: str, package: str) -> list[tuple[str, str]]:
        """Compose the target's root with `text` in place of its option for `package`."""
        group = target.group_of_package(package)
        if group is None:
            return [(package, f"verl-omni's root composes no group at `{package}`; cannot place this file")]
        os.makedirs(os.path.join(self.folder, group), exist_ok=True)
        with open(os.path.join(self.folder, group, f"{_NAME}.yaml"), "w", encoding="utf-8") as fh:
            fh.write(text)
        try:
            cfg = self._compose(target.CONFIG_NAME, [f"{group}@{package}={_NAME}"])
        except Exception as e:  # see root()
            return [("defaults", f"Hydra cannot compose it as `{group}`: {_first_line(e)}")]
        return _problems(cfg, self.reference())

    def overrides(self, overrides: list[str]) -> list[tuple[str, str]]:
        """Compose the target's root with launch-script overrides; on failure find each refused override.

        Value overrides are checked against the target's composed tree (a plain key must exist, a `+` key must not);
        only group overrides are composed one by one.
        """
        try:
            cfg = self.compose(overrides)
        except Exception as e:  # find which overrides Hydra refuses
            found = [_refused(self.reference(), ov) for ov in overrides if "." in ov.split("=", 1)[0]]
            for ov in (o for o in overrides if "." not in o.split("=", 1)[0]):
                try:
                    self.compose([ov])
                except Exception as err:  # a config-group override naming a group or option that does not exist
                    found.append((ov.lstrip("+~").split("=", 1)[0], f"Hydra refuses `{ov}`: {_first_line(err)}"))
            found = [f for f in found if f is not None]
            return found or [("<overrides>", f"Hydra cannot compose them: {_first_line(e)}")]
        return [(k, p) for k, p in _problems(cfg, self.reference()) if not p.startswith("missing")]


def _refused(reference: Any, override: str) -> tuple[str, str] | None:
    """Return why Hydra refuses a value override on `reference`, or None."""
    from omegaconf import OmegaConf

    prefix = override[: len(override) - len(override.lstrip("+~"))]
    key = override.lstrip("+~").split("=", 1)[0]
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(reference, parent) if parent else reference
    exists = node is not None and hasattr(node, "keys") and leaf in node
    if prefix in ("", "~") and not exists and not _dataclass_only(key):
        return key, f"Hydra refuses `{override}`: verl-omni's config has no `{key}` (add `+` only for a new key)"
    if prefix == "+" and exists:
        return key, f"Hydra refuses `{override}`: `{key}` already exists; drop the `+`"
    return None
