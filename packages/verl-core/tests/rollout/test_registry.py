"""Tests for `verl_core.rollout.registry`: built-ins, register(), entry points, errors."""

from __future__ import annotations

import pytest

from verl_core.rollout import registry
from verl_core.rollout.hf import HFHttpServer
from verl_core.rollout.registry import ENTRY_POINT_GROUP, available_backends, get_backend, register_backend


class MyServer(HFHttpServer):
    pass


@pytest.fixture(autouse=True)
def _clean_registry(monkeypatch):
    monkeypatch.setattr(registry, "_BACKENDS", registry._BACKENDS.copy())


def test_builtin_backends():
    assert {"hf", "vllm"} <= set(available_backends())
    assert get_backend("hf") is HFHttpServer
    assert get_backend("vllm").__name__ == "vLLMHttpServer"  # resolvable without vllm installed


def test_register_backend_by_class_and_path():
    register_backend("mine", MyServer)
    assert get_backend("mine") is MyServer
    register_backend("mine-path", f"{__name__}:MyServer")
    assert get_backend("mine-path") is MyServer
    with pytest.raises(ValueError, match="already registered"):
        register_backend("hf", MyServer)
    register_backend("hf", MyServer, replace=True)
    assert get_backend("hf") is MyServer


def test_entry_point_backend(tmp_path, monkeypatch):
    dist = tmp_path / "fake_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nfromep = {__name__}:MyServer\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "fromep" in available_backends()
    assert get_backend("fromep") is MyServer


def test_unknown_and_wrong_backends_are_named():
    with pytest.raises(
        KeyError, match=r"^rollout\.name: unknown rollout backend 'nope'; registered: .*hf.*entry point group"
    ):
        get_backend("nope")
    register_backend("broken", "verl_core.rollout.no_such_module:X")
    with pytest.raises(KeyError, match="cannot import"):
        get_backend("broken")
    register_backend("notserver", f"{__name__}:_clean_registry")
    with pytest.raises(TypeError, match="not a RolloutHttpServer"):
        get_backend("notserver")
