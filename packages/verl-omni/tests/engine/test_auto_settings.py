"""`verl_omni.engine.auto_settings`: what `compile_blocks`, `reshard_after_forward`, `cudnn_sdpa: null` resolve to."""

from __future__ import annotations

import pytest

from verl_omni.engine.auto_settings import (
    activation_bytes,
    choose_reshard_after_forward,
    resolve_compile_blocks,
    resolve_cudnn_sdpa,
)
from verl_omni.models import get_class

GIB = 2**30


@pytest.mark.parametrize(("value", "device", "expected"), [
    (None, "cuda", True), (None, "cpu", False), (False, "cuda", False), (True, "cpu", True),
])  # fmt: skip
def test_resolve_compile_blocks_is_on_for_cuda_unless_set(value, device, expected):
    assert resolve_compile_blocks(value, device) is expected


def _choose(value=None, device="cuda", free=100 * GIB, gathered=10 * GIB, act=30 * GIB, grads=0):
    return choose_reshard_after_forward(value, device_type=device, free_bytes=free, gathered_bytes=gathered,
                                        activation_bytes=act, grad_bytes=grads)  # fmt: skip


def test_reshard_auto_keeps_params_when_half_the_free_memory_holds_them():
    keep = _choose()  # 10 + 30 = 40 GiB <= 50 GiB
    assert keep.reshard_after_forward is False and "fits" in keep.reason
    assert "free 100.00 GiB" in keep.describe() and "gathered model 10.00 GiB" in keep.describe()
    edge = _choose(gathered=10 * GIB, act=30 * GIB, grads=10 * GIB)  # exactly 50 GiB: still kept
    assert edge.reshard_after_forward is False
    tight = _choose(grads=10 * GIB + 1)  # one byte over half
    assert tight.reshard_after_forward is True and "does not fit" in tight.reason


def test_reshard_auto_is_true_on_the_cpu_or_when_unsure_and_an_explicit_value_decides():
    assert _choose(device="cpu").reshard_after_forward is True
    assert _choose(free=None).reshard_after_forward is True
    assert _choose(free=0).reshard_after_forward is True
    assert _choose(value=True, free=1000 * GIB).reshard_after_forward is True  # explicit: the memory is not read
    assert _choose(value=False, device="cpu").reshard_after_forward is False
    assert _choose(value=False).reason == "set in the config"


def test_activation_bytes_by_hand():
    cfg = {"num_attention_heads": 2, "attention_head_dim": 8, "num_layers": 3, "num_single_layers": 1}
    # 10 tokens x 4 samples x width 16 x 2 bytes = 1280 bytes per layer-element; 17 elements x 4 layers
    assert activation_bytes(cfg, tokens=10, samples=4, elem_bytes=2, checkpointing=False) == 1280 * 17 * 4
    # checkpointing: one block input per layer + one block's full set
    assert activation_bytes(cfg, tokens=10, samples=4, elem_bytes=2, checkpointing=True) == 1280 * (4 + 17)


def test_an_engine_built_with_null_reshard_after_forward_reshards_every_unit(make_engine):
    # built directly (no ActorWorker to resolve it): null reshards, the root included (torch's None would not)
    from torch.distributed.fsdp import FSDPModule

    engine = make_engine()
    assert engine.config.fsdp_config.reshard_after_forward is None
    units = [m for m in engine.module.modules() if isinstance(m, FSDPModule)]
    assert engine.module in units and len(units) > 1
    assert all(g.post_forward_mesh_info is not None for m in units for g in m._get_fsdp_state()._fsdp_param_groups)


@pytest.mark.parametrize(("model", "value", "training", "enabled", "said"), [
    pytest.param("flux", None, True, False, "the flux adapter turns it off for training", id="flux-training"),
    pytest.param("flux", None, False, True, "a forward-only engine keeps it", id="flux-reference"),
    pytest.param("sd3", None, True, True, "the sd3 adapter allows it in training", id="sd3-training"),
    pytest.param("flux", True, True, True, "actor.fsdp_config.cudnn_sdpa=true", id="flux-key-true"),
    pytest.param("sd3", False, False, False, "ref.fsdp_config.cudnn_sdpa=false", id="sd3-reference-key-false"),
])  # fmt: skip
def test_resolve_cudnn_sdpa_takes_the_adapters_choice_unless_the_key_is_set(model, value, training, enabled, said):
    choice = resolve_cudnn_sdpa(value, get_class(model), training=training)
    assert choice.enabled is enabled and said in choice.reason
    assert choice.key == f"actor_rollout_ref.{'actor' if training else 'ref'}.fsdp_config.cudnn_sdpa"


def test_resolve_cudnn_sdpa_refuses_a_bad_value_naming_the_key():
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.actor\.fsdp_config\.cudnn_sdpa: expected true, false"):
        resolve_cudnn_sdpa("auto", get_class("flux"), training=True)
