"""`--validate` with the installed trainer: Hydra composes the migrated file, the trainer's `load_config` checks it.

`load_config` (verl_omni.trainer.config) is what `verl-omni-train` / `python -m verl_omni.trainer.main_diffusion`
runs before anything starts: it composes with Hydra, resolves every `${...}`, drops verl-omni keys of features left
off, and builds the typed dataclasses, raising one `ConfigError` (with the dotted key) for the first problem. To
report every problem by key, the check runs again without the offending key (a `~key` deletion, or without the
override that set it) until the config loads, at most `LIMIT` times.

- A root config (`defaults: [diffusion_trainer, ...]`) or a full dump is composed as the primary config of a
  temporary folder (the trainer's own config package is on Hydra's search path).
- A config-group file is listed after `diffusion_trainer` at its package in a temporary root, as a user would.
- Launch-script overrides are applied to `diffusion_trainer`; an override whose value is a shell variable is left
  out and reported as not checked.

Imports verl-omni (and so torch); only `--validate` imports this module.
"""

from __future__ import annotations

import os
import tempfile

from verl_migrate import target
from verl_migrate.keys import head_defaults

#: names of the temporary files (a migrated root named `diffusion_trainer` must not shadow the trainer's)
CANDIDATE = "verl_migrate_candidate"
WRAPPER = "verl_migrate_root"
LIMIT = 25
UNCHECKED = "verl-migrate-unchecked"
"""Stand-in value of a key whose value is a shell variable, set only when another key's check needs it set."""


def _load(
    config_name: str, config_dir: str | None, overrides: list[str], unchecked: frozenset[str] = frozenset()
) -> list[tuple[str, str]]:
    """Run the trainer's `load_config` until it accepts; return `(key, problem)` for each rejection.

    A rejection of a key in `unchecked` (its value is a shell variable, given when the script runs) is not a problem:
    the key gets the stand-in `UNCHECKED` once, and the check goes on.
    """
    filled: set[str] = set()
    from verl_core.config import ConfigError
    from verl_omni.trainer.config import load_config

    overrides = list(overrides)
    problems: list[tuple[str, str]] = []
    for _ in range(LIMIT):
        try:
            load_config(overrides, config_name=config_name, config_dir=config_dir)
            return problems
        except ConfigError as e:
            key, body = str(e.key), e.body
            if key in unchecked and key not in filled:
                filled.add(key)
                overrides.append(f"++{key}={UNCHECKED}")
                continue
            owner = f" ({e.owner})" if e.owner else ""
            problems.append((key, f"verl-omni's trainer rejects it: {body}{owner}"))
            if key.startswith("<"):  # Hydra could not compose: nothing to take away
                return problems
            if "MissingMandatoryValue" in body:  # `???`: to be given when the trainer runs
                problems[-1] = (key, f"`???`: a value you must give when you run it (`{key}=...`)")
                fill = head_defaults().get(key)
                if fill in (None, "???"):
                    return problems
                overrides.append(f"{key}={fill}")
                continue
            mine = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] == key]
            overrides = [o for o in overrides if o not in mine] if mine else [*overrides, f"~{key}"]
        except Exception as e:  # a deleted key someone interpolates, or another composition error: report, stop
            problems.append(("<config>", f"verl-omni's trainer cannot load it: {type(e).__name__}: {e}"))
            return problems
    problems.append(("<config>", f"more than {LIMIT} problems; fix these and validate again"))
    return problems


def check_root(text: str) -> list[tuple[str, str]]:
    """Check a root config, a config layered on the trainer's root, or a full dump (the file's text)."""
    with tempfile.TemporaryDirectory(prefix="verl_migrate_validate_") as folder:
        with open(os.path.join(folder, f"{CANDIDATE}.yaml"), "w", encoding="utf-8") as fh:
            fh.write(text)
        return _load(CANDIDATE, folder, [])


def check_group_file(text: str, package: str, folder_name: str = "migrated") -> list[tuple[str, str]]:
    """Check a config-group file listed after the trainer's root at `package`, from folder `folder_name`."""
    with tempfile.TemporaryDirectory(prefix="verl_migrate_validate_") as folder:
        os.makedirs(os.path.join(folder, folder_name))
        with open(os.path.join(folder, folder_name, f"{CANDIDATE}.yaml"), "w", encoding="utf-8") as fh:
            fh.write(text)
        with open(os.path.join(folder, f"{WRAPPER}.yaml"), "w", encoding="utf-8") as fh:
            fh.write(f"defaults:\n  - {target.CONFIG_NAME}\n  - {folder_name}@{package}: {CANDIDATE}\n  - _self_\n")
        return _load(WRAPPER, folder, [])


def check_overrides(overrides: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Check launch-script overrides on the trainer's root; return the problems and the keys left unchecked."""
    checked, unchecked = [], []
    for word in overrides:
        key, _, value = word.partition("=")
        (unchecked if "$" in value else checked).append(key.lstrip("+~") if "$" in value else word)
    return _load(target.CONFIG_NAME, None, checked, frozenset(unchecked)), unchecked
