"""The version probes of `verl_core.rollout.vllm._adapter`, against stand-in `vllm.config.lora` modules."""

from __future__ import annotations

import logging
import sys
import types
from typing import Literal

import pytest

from verl_core.rollout.vllm import _adapter


def _fake_lora_module(monkeypatch, **attrs):
    module = types.ModuleType("vllm.config.lora")
    for name, value in attrs.items():
        setattr(module, name, value)
    monkeypatch.setitem(sys.modules, "vllm.config.lora", module)
    return module


def test_lora_ranks_reads_vllm_literal_sorted(monkeypatch):
    _fake_lora_module(monkeypatch, MaxLoRARanks=Literal[64, 8, 16])
    assert _adapter.lora_ranks() == (8, 16, 64)


def test_lora_ranks_without_the_symbol_uses_the_known_list(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm.config.lora", None)  # import raises ImportError
    assert _adapter.lora_ranks() == _adapter.LORA_RANKS


def test_lora_ranks_of_unexpected_shape_warns_and_uses_the_known_list(monkeypatch, caplog):
    _fake_lora_module(monkeypatch, MaxLoRARanks=Literal["big"])
    with caplog.at_level(logging.WARNING, logger=_adapter.__name__):
        assert _adapter.lora_ranks() == _adapter.LORA_RANKS
    assert "MaxLoRARanks is not a Literal of ints" in caplog.text


def test_lora_ranks_lets_a_broken_vllm_raise(monkeypatch):
    module = _fake_lora_module(monkeypatch)

    def broken(name):
        raise RuntimeError(f"vllm failed while resolving {name}")

    module.__getattr__ = broken  # PEP 562: `from vllm.config.lora import MaxLoRARanks` calls it
    with pytest.raises(RuntimeError, match="vllm failed while resolving"):
        _adapter.lora_ranks()
