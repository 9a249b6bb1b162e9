"""In-memory LoRA for vLLM-Omni: `OmniTensorLoRARequest` and `VLLMOmniHijack`.

vLLM-Omni's `DiffusionLoRAManager` loads adapters from a folder only. A weight sync has the adapter as tensors in
memory, so `OmniTensorLoRARequest` carries them (`lora_tensors`) with their PEFT config (`peft_config`), and:

- before vllm-omni 0.28, `VLLMOmniHijack.hijack()` replaces `DiffusionLoRAManager._load_adapter` with a version
  that builds the adapter from the tensors and falls back to the original for any other request;
- from 0.28 the manager asks the pipeline first (`pipeline._load_diffusion_lora_adapter(lora_request=, lora_path=,
  dtype=)`); `TensorLoRAPipelineMixin` implements that hook, so no patch is needed.

Either way the adapter is checked before it is registered: every `target_modules` entry must name a module the
manager can wrap (its expected modules), and every adapter tensor must bind to a layer the manager will wrap. An
adapter that would bind zero modules (or drop some of its weights) raises `ValueError` naming them: upstream
users trained for days with a LoRA that bound nothing. Which route applies is decided in `compat`.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from verl_omni.rollout.vllm_omni import compat

__all__ = [
    "FAKE_LORA_PATH",
    "OmniTensorLoRARequest",
    "TensorLoRAPipelineMixin",
    "VLLMOmniHijack",
    "align_adapter",
    "check_binding",
    "load_tensor_adapter",
    "tensor_lora_request",
]

logger = logging.getLogger(__name__)

FAKE_LORA_PATH = "/nonexistent/verl-omni-tensor-lora"
"""`lora_path` of tensor requests: absolute, so vLLM's `get_adapter_absolute_path` never tries the hub."""
_DEFAULT_COMPONENTS = ("transformer", "transformer_2", "dit", "unet")
_TENSOR_REQUEST: type | None = None

OmniTensorLoRARequest: type
"""vLLM's `LoRARequest` plus `peft_config` and `lora_tensors`; built on first access by the module `__getattr__`."""


def __getattr__(name: str) -> Any:
    if name == "OmniTensorLoRARequest":  # built on first use: its base class is vLLM's
        return _tensor_request_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _tensor_request_class() -> type:
    """`OmniTensorLoRARequest(LoRARequest)` with msgspec fields `peft_config` and `lora_tensors` (default None)."""
    global _TENSOR_REQUEST
    if _TENSOR_REQUEST is None:
        from vllm.lora.request import LoRARequest

        class OmniTensorLoRARequest(LoRARequest):  # type: ignore[misc, valid-type]
            """A `LoRARequest` whose adapter comes from in-memory tensors plus a PEFT config, not a folder."""

            peft_config: Any = None
            lora_tensors: Any = None

        OmniTensorLoRARequest.__module__ = __name__
        _TENSOR_REQUEST = OmniTensorLoRARequest
    return _TENSOR_REQUEST


def tensor_lora_request(
    name: str, int_id: int, tensors: dict[str, Any], peft_config: dict[str, Any], path: str = FAKE_LORA_PATH
) -> Any:
    """An `OmniTensorLoRARequest` for adapter `int_id` (>= 1).

    Args:
        name (`str`): adapter name.
        int_id (`int`): adapter id; generate requests select the adapter by it.
        tensors (`dict[str, torch.Tensor]`): PEFT-named LoRA tensors (`...lora_A.weight` / `...lora_B.weight`); CPU
            float tensors of the manager's dtype are used in place (vLLM folds the LoRA scaling into `lora_B`).
        peft_config (`dict`): the adapter's PEFT config (`r`, `lora_alpha`, `target_modules`, ...).
        path (`str`, *optional*): the placeholder path; must be absolute.

    Raises:
        ValueError: empty `tensors`, a missing `peft_config`, a non-positive id or a relative path.
    """
    if not tensors:
        raise ValueError("lora_tensors: an in-memory adapter needs at least one tensor")
    if not isinstance(peft_config, dict) or "r" not in peft_config:
        raise ValueError(f"peft_config: expected a PEFT LoRA config dict with 'r', got {peft_config!r}")
    if int_id < 1:
        raise ValueError(f"lora_int_id: expected an int >= 1, got {int_id}")
    if not path.startswith("/"):
        raise ValueError(
            f"lora_path: must be absolute (a relative path makes vLLM look it up on the hub), got {path!r}"
        )
    cls = _tensor_request_class()
    return cls(lora_name=name, lora_int_id=int_id, lora_path=path, peft_config=dict(peft_config), lora_tensors=tensors)


# ---- checks -----------------------------------------------------------------------------------------------------


def _components(pipeline: Any) -> list[str]:
    names = [*_DEFAULT_COMPONENTS, *(getattr(pipeline, "_dit_modules", ()) or ()),
             *(getattr(pipeline, "_lora_components", ()) or ())]  # fmt: skip
    return list(dict.fromkeys(names))


def _packed_mapping(pipeline: Any) -> dict[str, list[str]]:
    """Packed layer suffix -> sub-projection suffixes, from the models' `stacked_params_mapping` (as the manager)."""
    mapping: dict[str, list[str]] = {}
    for module in pipeline.modules():
        for item in getattr(module, "stacked_params_mapping", None) or ():
            if isinstance(item, (list, tuple)) and len(item) >= 2 and all(isinstance(x, str) for x in item[:2]):
                packed, sub = (str(x).strip(".").split(".")[-1] for x in item[:2])
                if packed and sub and sub not in mapping.setdefault(packed, []):
                    mapping[packed].append(sub)
    return mapping


def expected_modules(pipeline: Any) -> set[str]:
    """Module suffixes the manager can wrap: vLLM linear layers (and LoRA wrappers) plus packed sub-projections."""
    from vllm.lora.layers import BaseLayerWithLoRA
    from vllm.model_executor.layers.linear import LinearBase

    found = {n.split(".")[-1] for n, m in pipeline.named_modules() if isinstance(m, (LinearBase, BaseLayerWithLoRA))}
    found.discard("base_layer")
    for packed, subs in _packed_mapping(pipeline).items():
        if packed in found:
            found.update(subs)
    return found


def _target_matcher(target_modules: Any) -> Any:
    from vllm_omni.diffusion.lora.utils import _match_target_modules

    if isinstance(target_modules, str) and target_modules:
        import re

        return lambda name: re.search(target_modules, name) is not None
    if isinstance(target_modules, (list, tuple, set)) and target_modules:
        targets = list(target_modules)
        return lambda name: _match_target_modules(name, targets)
    return lambda name: True


def check_target_modules(target_modules: Any, expected: set[str]) -> None:
    """Raise `ValueError` when an entry of `target_modules` names no module the manager can wrap.

    Raises:
        ValueError: the manager wraps nothing at all, or unknown target module names (listed with the known ones).
    """
    if not expected:
        raise ValueError("the diffusion pipeline has no LoRA-capable (vLLM linear) layers; no adapter can bind")
    if isinstance(target_modules, (list, tuple, set)):
        unknown = sorted(t for t in target_modules if str(t).split(".")[-1] not in expected)
        if unknown:
            raise ValueError(
                f"peft_config.target_modules: {unknown} match no LoRA-capable module of the pipeline; "
                f"expected module names: {sorted(expected)}"
            )


def check_binding(pipeline: Any, lora_model: Any, target_modules: Any) -> dict[str, list[str]]:
    """Which pipeline layers each adapter module binds to, as `DiffusionLoRAManager` will bind them.

    The manager wraps the vLLM linear layers of the pipeline's DiT components that match `target_modules`, and
    looks up an adapter module for each by full name, component-relative name, or suffix (packed layers also by
    their sub-projections). An adapter module that binds nothing would be silently dropped.

    Returns:
        `{adapter module name: [bound layer names]}`.

    Raises:
        ValueError: the adapter binds zero layers, or some of its modules bind none (names them).
    """
    from vllm.lora.layers import BaseLayerWithLoRA
    from vllm.model_executor.layers.linear import LinearBase

    matches = _target_matcher(target_modules)
    mapping = _packed_mapping(pipeline)
    loras = set(lora_model.loras)
    bound: dict[str, list[str]] = {name: [] for name in loras}
    for component in _components(pipeline):
        module = getattr(pipeline, component, None)
        if module is None or not hasattr(module, "named_modules"):
            continue
        for rel, layer in module.named_modules():
            if not isinstance(layer, (LinearBase, BaseLayerWithLoRA)) or "base_layer" in rel.split("."):
                continue
            full = f"{component}.{rel}"
            prefix, _, suffix = full.rpartition(".")
            subs = [f"{prefix}.{s}" for s in mapping.get(suffix, [])]
            if not (matches(full) or any(matches(s) for s in subs)):
                continue  # the manager does not wrap this layer
            for name in (full, rel, suffix, *subs, *(s.split(".", 1)[1] for s in subs), *mapping.get(suffix, [])):
                if name in loras:
                    bound[name].append(full)
    unbound = sorted(n for n, layers in bound.items() if not layers)
    if len(unbound) == len(loras):
        raise ValueError(
            f"LoRA adapter {lora_model.id} binds zero modules of the pipeline (adapter modules e.g. "
            f"{sorted(loras)[:4]}, target_modules={target_modules!r}); it would change nothing. Check that the "
            "tensor names are the transformer's module names and that target_modules names its linear layers"
        )
    if unbound:
        raise ValueError(
            f"LoRA adapter {lora_model.id}: {len(unbound)} of {len(loras)} adapter modules bind no layer and would "
            f"be dropped: {unbound[:6]}"
        )
    return bound


_LORA_SUFFIXES = (".lora_A.weight", ".lora_B.weight", ".lora_A.bias", ".lora_B.bias", ".lora_embedding_A",
                  ".lora_embedding_B")  # fmt: skip


def _layer_names(pipeline: Any) -> set[str]:
    """Component-relative names of the LoRA-capable layers, plus the sub-projection names of packed layers."""
    from vllm.lora.layers import BaseLayerWithLoRA
    from vllm.model_executor.layers.linear import LinearBase

    mapping = _packed_mapping(pipeline)
    names: set[str] = set()
    for component in _components(pipeline):
        module = getattr(pipeline, component, None)
        if module is None or not hasattr(module, "named_modules"):
            continue
        for rel, layer in module.named_modules():
            if isinstance(layer, (LinearBase, BaseLayerWithLoRA)) and "base_layer" not in rel.split("."):
                prefix, _, suffix = rel.rpartition(".")
                names.add(rel)
                names.update(f"{prefix}.{s}" if prefix else s for s in mapping.get(suffix, []))
    return names


def _split_lora_key(key: str) -> tuple[str, str]:
    for suffix in _LORA_SUFFIXES:
        if key.endswith(suffix):
            return key[: -len(suffix)], suffix
    return key, ""


def _target_suffix(module: str) -> str:
    """The shortest name suffix `target_modules` can match a module by (`to_q`; `img_mod.1` for numbered children)."""
    parts = module.split(".")
    return ".".join(parts[-2:]) if len(parts) > 1 and parts[-1].isdigit() else parts[-1]


def _served_names(module: str) -> list[str]:
    """vLLM-Omni's names for a diffusers module name: `attn.to_out.0` -> `attn.to_out`, `net.0` -> `net_0`."""
    names = [module[:-2]] if module.endswith(".0") else []
    parts = module.split(".")
    for i in range(len(parts) - 1):
        if parts[i] == "net" and parts[i + 1].isdigit():
            names.append(".".join([*parts[:i], f"net_{parts[i + 1]}", *parts[i + 2 :]]))
    return names


def align_adapter(pipeline: Any, tensors: dict[str, Any], peft_config: dict[str, Any]) -> tuple[dict, dict]:
    """A diffusers/PEFT-named adapter renamed to the served pipeline's layers, with explicit `target_modules`.

    Differences between a trainer's diffusers transformer and vLLM-Omni's are bridged as vLLM-Omni's own weight
    loaders bridge them: diffusers keeps an attention output projection in a list (`attn.to_out.0`) where
    vLLM-Omni's Qwen-Image and Wan have the layer itself (`attn.to_out`; its FLUX keeps the list, so the name
    binds as it is); diffusers' Wan feed-forward is `ffn.net.0.proj` / `ffn.net.2` where vLLM-Omni's is
    `ffn.net_0.proj` / `ffn.net_2`; and PEFT's `target_modules="all-linear"` is a keyword, which vLLM-Omni's
    manager would read as a regular expression matching nothing. The latter is replaced by the name suffixes of
    the modules the adapter carries, so exactly those layers are wrapped. A name is renamed only when it binds no
    layer and the renamed one does; names that still bind no layer are left for `check_binding` to report.

    Returns:
        `(tensors, peft_config)`: renamed copies (the tensors themselves are not copied).
    """
    layers = _layer_names(pipeline)
    renamed: dict[str, Any] = {}
    for key, tensor in tensors.items():
        module, suffix = _split_lora_key(key)
        bare = module.removeprefix("base_model.model.").removeprefix("transformer.")
        if suffix and bare not in layers:
            served = next((name for name in _served_names(bare) if name in layers), None)
            if served is not None:
                key = module[: len(module) - len(bare)] + served + suffix
        renamed[key] = tensor
    config = dict(peft_config)
    if config.get("target_modules") == "all-linear":
        modules = {_split_lora_key(k)[0] for k in renamed}
        config["target_modules"] = sorted({_target_suffix(m) for m in modules})
    return renamed, config


def load_tensor_adapter(pipeline: Any, lora_request: Any, dtype: Any, expected: set[str] | None = None) -> Any:
    """`(LoRAModel, PEFTHelper)` built from a tensor request and checked against `pipeline`; None for other requests.

    Raises:
        ValueError: no `peft_config`, unknown target modules, or a binding that would drop modules (see
            `check_binding`).
    """
    tensors = getattr(lora_request, "lora_tensors", None)
    if tensors is None:
        return None
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.peft_helper import PEFTHelper

    peft_config = getattr(lora_request, "peft_config", None)
    if not isinstance(peft_config, dict):
        raise ValueError(f"LoRA request {lora_request.lora_int_id}: lora_tensors given without a peft_config dict")
    tensors, peft_config = align_adapter(pipeline, tensors, peft_config)
    helper = PEFTHelper.from_dict(dict(peft_config))
    check_target_modules(helper.target_modules, expected_modules(pipeline) if expected is None else expected)
    model = LoRAModel.from_lora_tensors(
        lora_model_id=lora_request.lora_int_id,
        tensors=tensors,
        peft_helper=helper,
        device="cpu",
        dtype=dtype,
        weights_mapper=None,
    )
    check_binding(pipeline, model, helper.target_modules)
    for lora in model.loras.values():
        lora.optimize()  # folds the PEFT scaling into lora_b, as the manager's file loader does
    logger.info("tensor LoRA %d: %d modules from memory", lora_request.lora_int_id, len(model.loras))
    return model, helper


class TensorLoRAPipelineMixin:
    """Pipeline hook of vllm-omni >= 0.28: load `OmniTensorLoRARequest`s from memory, no patch needed."""

    def _load_diffusion_lora_adapter(self, *, lora_request: Any, lora_path: str, dtype: Any) -> Any:
        """`(LoRAModel, PEFTHelper)` for a tensor request; None lets the manager load `lora_path` as usual."""
        return load_tensor_adapter(self, lora_request, dtype)


class VLLMOmniHijack:
    """Teach vLLM-Omni's `DiffusionLoRAManager` to load adapters from in-memory tensors (idempotent, reversible).

    `hijack()` picks the route of the installed release (`compat`): before 0.28 it replaces
    `DiffusionLoRAManager._load_adapter` (the original serves every request without tensors); from 0.28 it
    patches nothing for pipelines that define the hook (`TensorLoRAPipelineMixin`) and, for a `pipeline_cls`
    given without it, adds the hook to that class. `unhijack()` undoes exactly what `hijack()` did.
    """

    _lock = threading.Lock()
    _original_load_adapter: Any = None
    _hooked_classes: list[type] = []  # noqa: RUF012 - class-level registry of what hijack() changed

    @classmethod
    def route(cls) -> str:
        """`"hook"` (vllm-omni >= 0.28, pipeline hook) or `"patch"` (earlier, `_load_adapter` replaced)."""
        return "hook" if compat.require("VLLMOmniHijack").has("lora_pipeline_hook") else "patch"

    @classmethod
    def hijack(cls, pipeline_cls: type | None = None) -> str:
        """Install the tensor-LoRA route for the installed release; calling it again changes nothing.

        Args:
            pipeline_cls (`type`, *optional*): on the hook route, a pipeline class to give the hook if it lacks it.

        Returns:
            The route taken: `"patch"` or `"hook"`.
        """
        with cls._lock:
            route = cls.route()
            if route == "patch":
                from vllm_omni.diffusion.lora.manager import DiffusionLoRAManager

                if cls._original_load_adapter is None:
                    original = DiffusionLoRAManager._load_adapter
                    cls._original_load_adapter = original

                    def _load_adapter(manager: Any, lora_request: Any) -> Any:
                        loaded = load_tensor_adapter(
                            manager.pipeline, lora_request, manager.dtype, expected=set(manager._expected_lora_modules)
                        )
                        return loaded if loaded is not None else original(manager, lora_request)

                    _load_adapter.__verl_hijack__ = True  # type: ignore[attr-defined]
                    _load_adapter.__doc__ = original.__doc__
                    DiffusionLoRAManager._load_adapter = _load_adapter
            elif pipeline_cls is not None and not hasattr(pipeline_cls, "_load_diffusion_lora_adapter"):
                pipeline_cls._load_diffusion_lora_adapter = TensorLoRAPipelineMixin._load_diffusion_lora_adapter
                cls._hooked_classes.append(pipeline_cls)
            return route

    @classmethod
    def unhijack(cls) -> None:
        """Restore the original `_load_adapter` and remove hooks `hijack()` added (no-op when not hijacked)."""
        with cls._lock:
            if cls._original_load_adapter is not None:
                from vllm_omni.diffusion.lora.manager import DiffusionLoRAManager

                DiffusionLoRAManager._load_adapter = cls._original_load_adapter
                cls._original_load_adapter = None
            while cls._hooked_classes:
                del cls._hooked_classes.pop()._load_diffusion_lora_adapter

    @classmethod
    def is_hijacked(cls) -> bool:
        """Whether `hijack()` changed anything that `unhijack()` has not restored."""
        return cls._original_load_adapter is not None or bool(cls._hooked_classes)
