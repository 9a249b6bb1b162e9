"""The config the migration aims at: verl-omni's trainer entry point, its Hydra config and its root config.

This module and the key tree in `data/verl_omni_diffusion_trainer.flat.txt` are the one place that says what the
target looks like; the rules (`_target_` classes, group names, the entry point), the root completion and
`--validate` read it from here.

Today they describe upstream verl-omni (a1139baf), the stand-in until this project's trainer ships its own
`diffusion_trainer` config. To switch to this project's config: regenerate the key tree and the constants below
with `tools/migrate-config/scripts/gen_target.py` (it composes the installed config with Hydra), review the diff,
and run the tests: `test_target.py` compares these constants with the installed config whenever it exists.
"""

from __future__ import annotations

import functools

#: what the key tree and constants below were taken from
SOURCE = "upstream verl-omni a1139baf (stand-in until this project's trainer config ships)"

#: the module a migrated launch script runs: `python3 -m ENTRY_MODULE` (upstream verl-omni's entry point; this
#: project's trainer runs it as an alias of `verl-omni-train`)
ENTRY_MODULE = "verl_omni.trainer.main_diffusion"

#: the package holding the Hydra configs, and the name of the trainer's root config in it
CONFIG_PACKAGE = "verl_omni.trainer.config"
CONFIG_NAME = "diffusion_trainer"

#: what a `hydra.searchpath` entry names to find the target's config groups
SEARCHPATH = f"pkg://{CONFIG_PACKAGE}"

#: the target root config's defaults list, in order, `_self_` last: (group, package or None, option)
ROOT_DEFAULTS: tuple[tuple[str, str | None, str], ...] = (
    ("diffusion/model_engine", None, "dp_diffusion"),
    ("diffusion/actor", "actor_rollout_ref.actor", "${diffusion/model_engine}_actor"),
    ("data", "data", "legacy_data"),
    ("diffusion/ref", "actor_rollout_ref.ref", "${diffusion/model_engine}_ref"),
    ("diffusion/rollout", "actor_rollout_ref.rollout", "diffusion_rollout"),
    ("diffusion/model", "actor_rollout_ref.model", "diffusion_model"),
    ("reward", "reward", "reward"),
    ("diffusion/distillation", "distillation", "diffusion_distillation"),
)

#: the options each config group of the target offers (a defaults entry must name one of them)
GROUP_OPTIONS: dict[str, tuple[str, ...]] = {
    "diffusion/model_engine": ("dp_diffusion", "veomni_diffusion"),
    "diffusion/actor": ("diffusion_actor", "dp_diffusion_actor", "veomni_diffusion_actor"),
    "diffusion/ref": ("diffusion_ref", "dp_diffusion_ref", "veomni_diffusion_ref"),
    "diffusion/rollout": ("diffusion_rollout",),
    "diffusion/model": ("diffusion_model",),
    "diffusion/engine": ("diffusion_fsdp", "diffusion_veomni"),
    "diffusion/distillation": ("diffusion_distillation",),
    "data": ("legacy_data",),
    "reward": ("reward",),
    "optim": ("fsdp", "veomni_diffusion"),
    "profiler": ("profiler",),
}


def group_of_package(package: str) -> str | None:
    """Return the target's config group composed at `package` by its root defaults list (None if none)."""
    for group, pkg, _ in ROOT_DEFAULTS:
        if pkg == package:
            return group
    return None


def option_exists(group: str, option: str) -> bool:
    """Return whether the target's group `group` has `option` (an interpolated option is checked per engine)."""
    options = GROUP_OPTIONS.get(group.lstrip("/"))
    if options is None:
        return False
    if "${" in option:
        engines = GROUP_OPTIONS.get("diffusion/model_engine", ())
        return any(option.replace("${diffusion/model_engine}", e) in options for e in engines)
    return option in options


@functools.cache
def root_keys() -> tuple[str, ...]:
    """Return the keys the target's root config defines itself (every key no group of its defaults list composes).

    A migrated root config replaces the target's root, so it must define these too (see `rules/root.py`).
    """
    from verl_migrate.keys import head_defaults

    packages = tuple(pkg + "." for _, pkg, _ in ROOT_DEFAULTS if pkg)
    return tuple(k for k in head_defaults() if not k.startswith(packages))


def target_class(path: str) -> str:
    """Return the `_target_` class the target's config names for the node at `path`.

    Raises:
        KeyError: the target's config has no `_target_` at `path`.
    """
    found = target_class_or_none(path)
    if found is None:
        raise KeyError(f"the target config has no `{path}._target_` (see verl_migrate/target.py)")
    return found


def target_class_or_none(path: str) -> str | None:
    """Return the `_target_` class the target's config names for the node at `path`, None if it names none."""
    from verl_migrate.keys import head_defaults

    return head_defaults().get(f"{path}._target_")


def new_group(old_package: str | None, old_group: str) -> str | None:
    """Return the target's group for an old defaults entry (by its package), None when the target has none."""
    if old_package:
        return group_of_package(old_package)
    candidate = f"diffusion/{old_group}"
    return candidate if candidate in GROUP_OPTIONS else None
