"""Upstream verl-omni (a1139baf) as a migration target: the tree the key-move rules were written from.

The rules implement the moves upstream verl-omni made to verl's pre-#6200 config; this project's trainer config
(`verl_migrate.target`) has a subset of upstream's keys. `pinned()` makes upstream's tree and root the target for a
while, so the rules' own behaviour can be tested against a tree that does not change when this project's config
does (the tests of each rule use it); migrations for this project never use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

SOURCE = "upstream verl-omni a1139baf"
FLAT = "upstream_verl_omni_a1139baf.flat.txt"
DATACLASS_ONLY = "upstream_verl_omni_dataclass_only.txt"

#: upstream's root defaults list, in order: (group, package or None, option)
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

#: the options of each of upstream's config groups
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


def _clear() -> None:
    from verl_migrate import keys, target

    for fn in (keys.head_defaults, keys._head_extras, keys._interior, target.root_keys):
        fn.cache_clear()


def _project() -> tuple:
    from verl_migrate import keys, target

    return (keys.HEAD_FILES, target.SOURCE, target.ROOT_DEFAULTS, target.GROUP_OPTIONS)


#: this project's target as `verl_migrate.target` and `verl_migrate.keys` define it at import
_PROJECT = _project()


@contextlib.contextmanager
def pinned(which: str = "upstream") -> Iterator[None]:
    """Make upstream verl-omni (or, with `which="project"`, this project's config) the target inside the block.

    Swaps the key tree, the root defaults list and the groups; the rules read them when they run.
    """
    from verl_migrate import keys, target

    saved = _project()
    if which == "upstream":
        keys.HEAD_FILES = (FLAT, DATACLASS_ONLY)
        target.SOURCE, target.ROOT_DEFAULTS, target.GROUP_OPTIONS = SOURCE, ROOT_DEFAULTS, GROUP_OPTIONS
    else:
        keys.HEAD_FILES, target.SOURCE, target.ROOT_DEFAULTS, target.GROUP_OPTIONS = _PROJECT
    _clear()
    try:
        yield
    finally:
        keys.HEAD_FILES, target.SOURCE, target.ROOT_DEFAULTS, target.GROUP_OPTIONS = saved
        _clear()
