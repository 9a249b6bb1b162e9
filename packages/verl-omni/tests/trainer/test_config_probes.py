"""The config loader's probes catch only the errors they expect; anything else reaches the user."""

from __future__ import annotations

import dataclasses
import sys

import pytest
from omegaconf import OmegaConf

from verl_omni.trainer.config import loader
from verl_omni.trainer.config.unsupported import prune_unsupported


@dataclasses.dataclass
class _Node:
    x: int = 1


def test_as_addition_leaves_an_unparsable_override_to_hydra():
    assert loader._as_addition("a=[1", OmegaConf.create({}), OmegaConf) == "a=[1"
    assert loader._as_addition("b=2", OmegaConf.create({}), OmegaConf) == "+b=2"


def test_as_addition_lets_a_non_hydra_error_through(monkeypatch):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    def broken(*args, **kwargs):
        raise RuntimeError("parser bug")

    monkeypatch.setattr(OverridesParser, "create", broken)
    with pytest.raises(RuntimeError, match="parser bug"):
        loader._as_addition("a=1", OmegaConf.create({}), OmegaConf)


def test_prune_unsupported_leaves_a_bad_target_to_the_builder():
    tree = {"_target_": "no_such_module_xyz.Thing", "x": 2}
    assert prune_unsupported(tree, _Node, "node") == []


def test_prune_unsupported_lets_an_import_time_crash_through(tmp_path, monkeypatch):
    (tmp_path / "crashing_target_mod.py").write_text("raise RuntimeError('module body crashed')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "crashing_target_mod", raising=False)
    with pytest.raises(RuntimeError, match="module body crashed"):
        prune_unsupported({"_target_": "crashing_target_mod.Thing"}, _Node, "node")
