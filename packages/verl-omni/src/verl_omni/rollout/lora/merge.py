"""Serve LoRA adapters folded into the base weights (`W = W0 + delta`), always recomputed from a pristine `W0`.

peft's `LoraLayer.merge()` adds `get_delta_weight(adapter)` to the base weight and marks the layer `merged`,
after which its forward is the plain base layer. Merging again after the adapter changed must not subtract the
old delta (`unmerge()`): in bf16 each subtract-add round leaves rounding error behind, and it accumulates over
hundreds of weight syncs. So the first merge of a layer copies its base parameters (the pristine copies, kept as
non-persistent buffers of the peft layer, so they move with the module on `.to()` and stay out of its state
dict), and every later merge starts from a copy of them. `keep_adapter_fp32` keeps the adapter weights in
float32, so peft computes the delta in float32 and the in-place add into a bf16 base rounds once.

For a plain `lora.Linear` layer `merge` does peft's arithmetic itself (`W = W0 + (B @ A) * scaling`, the same
kernels in the same order, so the same bits) without peft's per-call bookkeeping and without a separate reset copy;
other layers (DoRA, `lora_bias`, `fan_in_fan_out`, embeddings, convolutions) go through peft's `merge()`. On CUDA
a plain layer with one active adapter is merged by a Triton kernel (`lora.kernel`, one launch per layer
layout: the same float32 products and sums, the delta never written to memory; the summation order is the
kernel's, so a rare last bit may differ from peft's), unless `kernel=False`. `MergePlan` does the per-layer
lookups once for merges repeated after every weight update.
"""

from __future__ import annotations

import math

import torch

from verl_omni.rollout.lora import kernel as lora_kernel

__all__ = ["MergePlan", "keep_adapter_fp32", "merge", "pristine_tensors", "restore", "wrapped_layers"]

_PRISTINE = "verl_pristine_"  # buffer-name prefix of a pristine copy on a peft layer


def wrapped_layers(transformer: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The peft LoRA layers of `transformer`, by module name."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in transformer.named_modules() if isinstance(m, LoraLayer)}


def _pristine(layer: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Base-layer parameter name -> pristine copy (empty before the first merge)."""
    return {n.removeprefix(_PRISTINE): b for n, b in layer.named_buffers(recurse=False) if n.startswith(_PRISTINE)}


@torch.no_grad()
def _reset(layer: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Base parameters := pristine copies (bit-exact), and the layer no longer counts as merged."""
    base = layer.get_base_layer()
    for name, tensor in saved.items():
        getattr(base, name).copy_(tensor)
    del layer.merged_adapters[:]  # the state peft's `merged` reads; the delta is gone with the copy above


@torch.no_grad()
def merge(transformer: torch.nn.Module, layers: list[torch.nn.Module] | None = None, *, kernel: bool = True) -> int:
    """Fold the active adapters into the base weights of `layers` (default: every LoRA layer): base = W0 + delta.

    `kernel=False` keeps to torch ops (peft's arithmetic bit for bit) where the CUDA kernel would run. To merge the
    same layers again and again (after every weight update), build a `MergePlan` once and `run()` it.

    Returns:
        The number of layers merged.
    """
    layers = list(wrapped_layers(transformer).values()) if layers is None else layers
    return MergePlan(layers, kernel=kernel).run()


class _Plain:
    """A plain `lora.Linear` layer's merge: its tensors looked up once (the objects outlive sleep / wake)."""

    def __init__(self, layer: torch.nn.Module, saved: dict[str, torch.Tensor], adapters: list[str]) -> None:
        base = layer.get_base_layer()
        self.layer, self.adapters = layer, adapters
        self.weight, self.w0 = base.weight, saved["weight"]
        self.others = [(getattr(base, name), tensor) for name, tensor in saved.items() if name != "weight"]
        self.factors = [(layer.lora_B[a].weight, layer.lora_A[a].weight, layer.scaling[a]) for a in adapters]

    def reset(self) -> None:
        """Other base parameters := pristine; the adapters count as merged (the weight is written next)."""
        for param, tensor in self.others:
            param.data.copy_(tensor)
        self.layer.merged_adapters[:] = self.adapters

    def job(self) -> lora_kernel.MergeJob | None:
        """The kernel's job for this layer, or None (several adapters, or tensors it does not cover)."""
        if len(self.factors) != 1:
            return None
        lora_b, lora_a, scale = self.factors[0]
        weight = self.weight.data
        return (
            (weight, self.w0, lora_b, lora_a, scale) if lora_kernel.supports(weight, self.w0, lora_b, lora_a) else None
        )

    def merge_with_torch(self) -> None:
        """`weight = W0 + (B @ A) * scaling` per adapter, as peft's `Linear.merge` computes it (same bits).

        The first adapter's add writes straight from the pristine copy into the weight (`torch.add(..., out=)`: the
        same float32 sum and one rounding as peft's copy-then-`+=`).
        """
        weight = self.weight.data
        for i, (lora_b, lora_a, scale) in enumerate(self.factors):
            delta = _delta(lora_b, lora_a, scale)
            if i == 0:
                torch.add(self.w0, delta, out=weight)
            else:
                weight += delta


class MergePlan:
    """The merge of a fixed list of LoRA layers, prepared once; `run()` folds the adapters in (= `merge`).

    Finding each layer's tensors and checking which path it takes costs more host time than the kernels on a GPU,
    so a plan does it once. It stays valid while the layers keep their adapters (build a new one after adding or
    removing one); moving the module's tensors in place (sleep / wake) does not invalidate it. Plain `lora.Linear`
    layers with float32 adapters are merged here (on CUDA, one kernel per layer shape: `lora.kernel`, unless
    `kernel=False`); other layers (DoRA, `lora_bias`, `fan_in_fan_out`, embeddings, convolutions) by peft's
    `merge()`. The first plan of a layer saves its pristine base parameters.
    """

    def __init__(self, layers: list[torch.nn.Module], *, kernel: bool = True) -> None:
        self.kernel = kernel
        self._plain: list[_Plain] = []
        self._peft: list[torch.nn.Module] = []
        for layer in layers:
            saved = _pristine(layer)
            if not saved:  # the first merge: the base weights are pristine now, keep copies of them
                for name, param in layer.get_base_layer().named_parameters(recurse=False):
                    layer.register_buffer(_PRISTINE + name, param.detach().clone(), persistent=False)
                saved = _pristine(layer)
            adapters = _plain_adapters(layer, saved)
            if adapters:
                self._plain.append(_Plain(layer, saved, adapters))
            else:
                self._peft.append(layer)

    def __len__(self) -> int:
        return len(self._plain) + len(self._peft)

    @torch.no_grad()
    def run(self) -> int:
        """Merge every layer of the plan from its pristine weights; returns the number of layers."""
        jobs = []
        for plain in self._plain:
            plain.reset()
            job = plain.job() if self.kernel else None
            if job is None:
                plain.merge_with_torch()
            else:
                jobs.append(job)
        if jobs:
            lora_kernel.merge_many(jobs)
        for layer in self._peft:
            _reset(layer, _pristine(layer))
            layer.merge()  # peft: base.weight += get_delta_weight(a) for the active adapters; `merged` becomes True
        return len(self)


def _plain_adapters(layer: torch.nn.Module, saved: dict[str, torch.Tensor]) -> list[str]:
    """The active adapters when this module merges `layer` itself (a plain `lora.Linear`, float32 adapters)."""
    from peft.tuners.lora.layer import Linear

    adapters = [a for a in layer.active_adapters if a in layer.lora_A]
    if (
        type(layer) is not Linear
        or layer.fan_in_fan_out
        or "weight" not in saved
        or any(a in layer.lora_variant or layer.lora_bias.get(a) for a in adapters)
        or any(layer.lora_B[a].weight.dtype != torch.float32 for a in adapters)
    ):
        return []
    return adapters


def _delta(lora_b: torch.Tensor, lora_a: torch.Tensor, scaling: float) -> torch.Tensor:
    """`(B @ A) * scaling` bit for bit; for a power-of-two `scaling` as `B @ (A * scaling)`, one pass fewer.

    Scaling by a power of two is exact in floating point and commutes with every rounding of the product (barring
    overflow and subnormals, far from LoRA's magnitudes), so the small `r x in` operand is scaled instead of the
    `out x in` product: the merge is memory-bound and this saves a read and a write of the float32 delta.
    """
    mantissa, _ = math.frexp(scaling)
    if mantissa == 0.5:
        return lora_b @ (lora_a * scaling)
    return (lora_b @ lora_a) * scaling


def restore(transformer: torch.nn.Module) -> None:
    """Serve the pristine base weights again (bit-exact), unmerged, and drop the pristine copies."""
    for layer in wrapped_layers(transformer).values():
        saved = _pristine(layer)
        if saved:
            _reset(layer, saved)
            for name in saved:
                delattr(layer, _PRISTINE + name)


def pristine_tensors(transformer: torch.nn.Module) -> dict[int, tuple[torch.Tensor, torch.nn.Module]]:
    """`id(base parameter)` -> (its pristine copy, the LoRA layer) for every merged layer."""
    out = {}
    for layer in wrapped_layers(transformer).values():
        base = layer.get_base_layer()
        for name, tensor in _pristine(layer).items():
            out[id(getattr(base, name))] = (tensor, layer)
    return out


@torch.no_grad()
def keep_adapter_fp32(transformer: torch.nn.Module, adapter_name: str) -> None:
    """Hold the adapter's `lora_A` / `lora_B` weights in float32 (the delta is then computed in float32)."""
    for layer in wrapped_layers(transformer).values():
        for part in (layer.lora_A, layer.lora_B):
            if adapter_name in part:
                part[adapter_name].float()
