"""`verl_omni.engine.state_entries`: the cached walk behind the weight export follows every change of the module."""

from __future__ import annotations

import torch
from torch import nn

from verl_omni.engine.lora import export_weights
from verl_omni.engine.state_entries import _LAYOUT_ATTR, state_entries


def _net() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2, bias=False))
    net.register_buffer("scratch", torch.ones(2), persistent=False)
    return net


def _keys(module: nn.Module) -> list[str]:
    return [k for k, _ in state_entries(module)]


def test_layout_is_reused_while_nothing_changes():
    net = _net()
    assert _keys(net) == list(net.state_dict())
    layout = net.__dict__[_LAYOUT_ATTR]
    nn.Linear(2, 2)  # registrations elsewhere (a new module) only cost a rebuild
    assert _keys(net) == list(net.state_dict())
    rebuilt = net.__dict__[_LAYOUT_ATTR]
    assert _keys(net) == list(net.state_dict())
    assert net.__dict__[_LAYOUT_ATTR] is rebuilt and rebuilt is not layout


def test_parameters_set_to_none_and_back_and_deleted():
    net = _net()
    assert "2.bias" not in _keys(net)
    net[2].bias = nn.Parameter(torch.zeros(2))  # None -> a tensor
    assert _keys(net) == list(net.state_dict()) and "2.bias" in _keys(net)
    net[0].bias = None  # a tensor -> None: same dict sizes
    assert _keys(net) == list(net.state_dict()) and "0.bias" not in _keys(net)
    del net[0].weight
    assert _keys(net) == list(net.state_dict()) and "0.weight" not in _keys(net)


def test_buffers_made_persistent_or_not():
    net = _net()
    assert "scratch" not in _keys(net)
    net._non_persistent_buffers_set.discard("scratch")
    assert _keys(net) == list(net.state_dict()) and "scratch" in _keys(net)


def test_export_reads_a_parameter_swapped_in_without_registration():
    """FSDP2 swaps parameters by writing `_parameters` directly (no hook): the export must read the new tensor."""
    net = _net()
    first = export_weights(net, lora_only=False)
    torch.testing.assert_close(first["0.weight"], net[0].weight.detach())
    swapped = nn.Parameter(torch.full((3, 4), 7.0))
    net[0]._parameters["weight"] = swapped
    second = export_weights(net, lora_only=False)
    assert torch.equal(second["0.weight"], swapped.detach())
    net[0]._parameters["weight"] = nn.Parameter(torch.zeros(4, 3))  # another shape, same name
    assert export_weights(net, lora_only=False)["0.weight"].shape == (4, 3)


def test_export_follows_a_dtype_changed_in_place():
    """`module.to(dtype)` keeps the Parameter objects: the export's kept slots must see the new dtype."""
    net = _net()
    assert export_weights(net, lora_only=False)["0.weight"].dtype == torch.float32
    net.to(torch.float64)
    got = export_weights(net, lora_only=False)
    assert got["0.weight"].dtype == torch.float64 and torch.equal(got["0.weight"], net[0].weight.detach())
