"""Tests for `verl_core.registry.Registry`: lookup, aliases, duplicates, did-you-mean, lazy module import."""

from __future__ import annotations

import sys
import types

import pytest

from verl_core.registry import DuplicateNameError, Registry, UnknownNameError


@pytest.fixture
def losses() -> Registry:
    reg: Registry = Registry("loss", key="actor.diffusion_loss.loss_mode", hint=" (register one with register_loss)")

    @reg.register("flow_grpo", "flowgrpo")
    def flow_grpo():
        return "fg"

    reg.add("grpo_guard", len)
    return reg


def test_registry_register_get_and_aliases(losses):
    assert losses.get("flow_grpo") is losses.get("flowgrpo") is losses["flow_grpo"]
    assert losses.get("flow_grpo")() == "fg"
    assert losses.names() == ["flow_grpo", "flowgrpo", "grpo_guard"]
    assert "grpo_guard" in losses and "nope" not in losses and len(losses) == 3
    assert dict(losses)["grpo_guard"] is len


def test_registry_unknown_name_names_the_key_suggests_and_lists(losses):
    with pytest.raises(UnknownNameError) as info:
        losses.get("flow_grop")
    assert str(info.value) == (
        "actor.diffusion_loss.loss_mode: unknown loss 'flow_grop'; did you mean 'flow_grpo'? "
        "registered: flow_grpo, flowgrpo, grpo_guard (register one with register_loss)"
    )
    assert isinstance(info.value, KeyError)
    with pytest.raises(KeyError, match=r"unknown loss 'dpo'; registered: flow_grpo") as info:
        losses.get("dpo")  # nothing close: no suggestion
    assert "did you mean" not in str(info.value)


def test_registry_notes_say_why_a_name_is_absent():
    reg: Registry = Registry("reward manager", key="reward.reward_manager.name", notes={"naive": "text only"})
    with pytest.raises(KeyError, match=r"^reward\.reward_manager\.name: unknown reward manager 'naive' \(text only\)"):
        reg.get("naive")


def test_registry_refuses_a_second_object_under_a_taken_name(losses):
    with pytest.raises(DuplicateNameError, match=r"loss_mode: 'flowgrpo' is already registered to .*flow_grpo"):
        losses.add("new", print, "flowgrpo")
    assert "new" not in losses  # nothing of a refused registration stays
    assert losses.add("grpo_guard", len) is len  # the same object again is a no-op
    losses.add("grpo_guard", print, replace=True)
    assert losses.get("grpo_guard") is print
    with pytest.raises(ValueError, match=r"loss_mode: a loss name must be a non-empty str, got ''"):
        losses.add("", print)


def test_registry_copy_is_independent(losses):
    copy = losses.copy()
    copy.add("only_in_copy", print)
    assert "only_in_copy" in copy and "only_in_copy" not in losses
    assert copy.key == losses.key


def test_registry_imports_a_module_once_before_giving_up(tmp_path, monkeypatch):
    reg: Registry = Registry("model", key="model name")
    monkeypatch.setitem(sys.modules, "registry_under_test", types.SimpleNamespace(REG=reg))
    (tmp_path / "registers_one_ext.py").write_text(
        "import registry_under_test as t\nIMPORTS = globals().get('IMPORTS', 0) + 1\nt.REG.add('ext_model', object)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.get("ext_model", import_module="registers_one_ext") is object
    module = sys.modules["registers_one_ext"]
    with pytest.raises(KeyError, match=r"unknown model 'missing' \(after importing 'registers_one_ext'\)"):
        reg.get("missing", import_module="registers_one_ext")
    assert module.IMPORTS == 1
    monkeypatch.delitem(sys.modules, "registers_one_ext")
