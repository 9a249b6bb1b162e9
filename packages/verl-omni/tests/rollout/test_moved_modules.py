"""The rollout modules moved into `rollout/diffusers/` and `rollout/lora/` (issue 34) keep their old import paths.

Each old module re-exports the public names of its new home as the very same objects, so old imports, pickles and
`"module:Class"` strings naming the old path resolve; the backend entry points name the new homes.
"""

from __future__ import annotations

import importlib
import pathlib
import pickle
import tomllib

import pytest

from verl_core.rollout.registry import get_backend

MOVED = {
    "verl_omni.rollout.diffusers_server": "verl_omni.rollout.diffusers.server",
    "verl_omni.rollout.diffusers_engine": "verl_omni.rollout.diffusers.engine",
    "verl_omni.rollout.diffusers_options": "verl_omni.rollout.diffusers.options",
    "verl_omni.rollout.coalesce": "verl_omni.rollout.diffusers.coalesce",
    "verl_omni.rollout.engine_calls": "verl_omni.rollout.diffusers.engine_calls",
    "verl_omni.rollout.host_offload": "verl_omni.rollout.diffusers.host_offload",
    "verl_omni.rollout.staging": "verl_omni.rollout.diffusers.staging",
    "verl_omni.rollout.lora_merge": "verl_omni.rollout.lora.merge",
    "verl_omni.rollout.lora_merge_kernel": "verl_omni.rollout.lora.kernel",
}
PYPROJECT = pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml"


@pytest.mark.parametrize("old_path", sorted(MOVED))
def test_old_path_re_exports_the_same_objects(old_path: str) -> None:
    old, new = importlib.import_module(old_path), importlib.import_module(MOVED[old_path])
    assert old is not new and new.__all__, old_path
    assert sorted(old.__all__) == sorted(new.__all__), f"{old_path} re-exports other names than {new.__name__}"
    for name in new.__all__:
        assert getattr(old, name) is getattr(new, name), f"{old_path}.{name}"


def test_pickles_naming_the_old_module_load_the_moved_class() -> None:
    from verl_omni.rollout import DiffusersHttpServer, DiffusersRolloutEngine
    from verl_omni.rollout.diffusers.host_offload import HostOffload

    for cls in (DiffusersHttpServer, DiffusersRolloutEngine, HostOffload):
        old_module = next(old for old, new in MOVED.items() if new == cls.__module__)
        assert pickle.loads(f"c{old_module}\n{cls.__qualname__}\n.".encode()) is cls  # a pickle made before the move
        assert pickle.loads(pickle.dumps(cls)) is cls  # by reference, under the new module
        assert cls.__module__.startswith(("verl_omni.rollout.diffusers.", "verl_omni.rollout.lora.")), cls


def test_backend_entry_points_name_the_registered_classes() -> None:
    entry_points = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]["verl_core.rollout_backends"]
    assert set(entry_points) == {"diffusers", "vllm_omni"}
    for name, target in entry_points.items():
        module, _, attr = target.partition(":")
        assert getattr(importlib.import_module(module), attr) is get_backend(name), f"entry point {name} = {target}"
    assert entry_points["diffusers"] == "verl_omni.rollout.diffusers.server:DiffusersHttpServer"
