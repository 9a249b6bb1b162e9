"""`state_entries(module)`: `module.state_dict()`'s entries in its order, without walking every module per call.

A LoRA-wrapped transformer has thousands of modules; walking them and building the dict costs milliseconds per
weight export. The walk is done once (`_Layout`) and re-used while the module tree cannot have changed: no
submodule, parameter or buffer was registered anywhere in the process since (torch's global registration hooks
count them; this module installs those hooks on import) and no walked module's dicts changed size.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = ["entry_cache", "select_entries", "state_entries"]

_LAYOUT_ATTR = "_verl_export_layout"  # where a module keeps its `_Layout` (a plain attribute: dies with it)


_REGISTRATIONS = [0]  # submodules, parameters and buffers registered anywhere in this process so far


def _count_registration(module: nn.Module, name: str, value: Any) -> None:
    _REGISTRATIONS[0] += 1


for _register in (
    torch.nn.modules.module.register_module_module_registration_hook,
    torch.nn.modules.module.register_module_parameter_registration_hook,
    torch.nn.modules.module.register_module_buffer_registration_hook,
):
    _register(_count_registration)


class _Layout:
    """Where each `module.state_dict()` entry lives, so an export need not walk thousands of modules' dicts.

    Built by one walk (`named_modules(remove_duplicate=False)`, the order `state_dict` uses) and checked against a
    real `state_dict()` once. Valid while no submodule, parameter or buffer was registered anywhere (torch's global
    registration hooks count them: an added or replaced one) and every walked module's submodule, parameter, buffer
    and state-dict hook dicts keep their sizes (a removed one); `current` checks both each call.
    """

    def __init__(self, module: nn.Module) -> None:
        self.registrations = _REGISTRATIONS[0]
        self.sized: list[Any] = []  # each walked module's dicts and sets whose sizes must not change
        self.hooked: list[tuple[str, nn.Module]] = []  # modules with state-dict pre-hooks (run every export)
        self.owners: list[tuple[str, dict[str, Any], str]] = []  # (key, the owner's _parameters/_buffers, name)
        self.post_hooks = False  # some module rewrites the dict: use `state_dict()` itself
        for prefix, m in module.named_modules(remove_duplicate=False):
            dotted = f"{prefix}." if prefix else ""
            self.sized += (m._modules, m._parameters, m._buffers, m._non_persistent_buffers_set,
                           m._state_dict_pre_hooks, m._state_dict_hooks)  # fmt: skip
            self.post_hooks |= bool(m._state_dict_hooks)
            if m._state_dict_pre_hooks:
                self.hooked.append((dotted, m))
            self.owners.extend((dotted + n, m._parameters, n) for n in m._parameters)
            skip = m._non_persistent_buffers_set
            self.owners.extend((dotted + n, m._buffers, n) for n in m._buffers if n not in skip)
        self.sizes = list(map(len, self.sized))
        self.verified = False  # a real `state_dict()` confirmed the keys of the non-None entries
        self.absent: list[int] = []  # owners whose entry was None then (not in the state dict)
        self.plans: dict[tuple[Any, ...], tuple[list[int], list[str]]] = {}  # selection -> (entry indices, keys)
        self.cache: dict[Any, Any] = {}  # the caller's own, dropped with the layout (`entry_cache`)

    def valid(self) -> bool:
        return self.registrations == _REGISTRATIONS[0] and list(map(len, self.sized)) == self.sizes

    @classmethod
    def current(cls, module: nn.Module) -> _Layout:
        layout = module.__dict__.get(_LAYOUT_ATTR)
        if layout is None or not layout.valid():
            layout = cls(module)
            object.__setattr__(module, _LAYOUT_ATTR, layout)  # not a submodule, not in the state dict
        return layout


def state_entries(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """`module.state_dict()`'s (name, tensor) pairs in its order, without building the dict each call.

    Runs the modules' state-dict pre-hooks (e.g. FSDP2's switch back to sharded parameters), then reads each entry
    from its owner (`_Layout`). A module with state-dict post-hooks (which may rewrite the dict) or a key list that
    differs from a real `state_dict()` uses `state_dict()` itself.
    """
    return select_entries(module, None)


def select_entries(
    module: nn.Module, selection: tuple[Any, ...] | None, keep: Callable[[str], bool] | None = None
) -> list[tuple[str, torch.Tensor]]:
    """`state_entries(module)` restricted to the keys `keep(key)` accepts (cached per `selection`; None: all)."""
    layout = _Layout.current(module)
    if layout.post_hooks:
        return [(k, v) for k, v in module.state_dict().items() if keep is None or keep(k)]
    for dotted, m in layout.hooked:
        for hook in m._state_dict_pre_hooks.values():
            hook(m, dotted, False)
    owners = layout.owners
    if not layout.verified or any(owners[i][1][owners[i][2]] is not None for i in layout.absent):
        layout.absent = [i for i, (_, owner, n) in enumerate(owners) if owner[n] is None]  # e.g. a bias=None
        keys = tuple(k for k, owner, n in owners if owner[n] is not None)
        layout.verified, layout.plans = False, {}
        if tuple(module.state_dict()) != keys:
            return [(k, v) for k, v in module.state_dict().items() if keep is None or keep(k)]
        layout.verified = True
    plan = layout.plans.get(selection)
    if plan is None:
        absent = set(layout.absent)
        picked = [i for i, (k, _, _) in enumerate(owners) if i not in absent and (keep is None or keep(k))]
        plan = layout.plans[selection] = (picked, [owners[i][0] for i in picked])
    entries = [(key, owners[i][1][owners[i][2]]) for i, key in zip(plan[0], plan[1], strict=True)]
    if any(v is None for _, v in entries):  # set to None since the check: not in the state dict any more
        layout.verified = False
        return select_entries(module, selection, keep)
    return entries


def entry_cache(module: nn.Module) -> dict[Any, Any]:
    """A dict for the caller's derived data (e.g. export slots), valid as long as `module`'s current layout."""
    return _Layout.current(module).cache
