"""Worker-side weight sync of the vLLM family: tensors through `collective_rpc`, checked loads, read-back.

Three things every vLLM-family worker extension needs, for any model whose loader fuses or reshapes tensors:

- **Transport.** vLLM's engine core decodes `collective_rpc` arguments with msgpack and no type hints, so a tensor
  argument arrives as a `[dtype, shape, data]` list (vLLM 0.26: "'list' object has no attribute 'to'"). A bucket
  therefore travels as one bytes payload in the project's tensor framing (`pack_tensors` / `unpack_tensors`,
  `verl_core.rollout.tensor_payload`), which every RPC path carries unchanged.
- **Checked loads.** `load_each` hands tensors to the model's own `load_weights` one at a time and reports, as
  data, each tensor the loader refused (a wrong shape asserts deep in vLLM) or silently skipped (vLLM-Omni's
  transformers skip unknown names with a debug log: the failure mode of upstream's #552/#658). The server turns
  the report into a `WeightSyncError` naming the tensor.
- **Read-back.** `read_back` returns, under the trainer's names, what the engine serves now, although vLLM fuses
  q/k/v and gate/up into one parameter. It asks the model's own loader where each tensor goes: it loads a NaN probe
  of the tensor's shape, finds the elements that turned NaN, restores them and gathers the served values from
  those positions, then checks the answer by loading it back (a no-op exactly when the loader copies the tensor
  unchanged). The positions are cached on the model, so later reads are gathers. Shapes come from the served
  checkpoint's safetensors headers (`checkpoint_specs`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from verl_core.rollout.tensor_payload import decode_tensor_body, encode_tensor_body

__all__ = ["checkpoint_specs", "load_each", "pack_tensors", "read_back", "read_back_reply", "unpack_tensors"]

LoadFn = Callable[[list[tuple[str, torch.Tensor]]], Any]
"""The model's loader: takes `(name, tensor)` pairs, returns what it loaded (vLLM: a set of parameter names)."""

_INDEX_ATTR = "_verl_readback_index"
_Index = dict[tuple[str, tuple[int, ...]], list[tuple[str, torch.Tensor]]]
"""(name, shape) -> [(parameter name, flat element indices)] the loader writes that tensor into, in order."""


def pack_tensors(tensors: Iterable[tuple[str, torch.Tensor]]) -> bytes:
    """One bytes payload holding `(name, tensor)` pairs in order (CPU copies; any device in)."""
    fields = {}
    for name, tensor in tensors:
        if name in fields:
            raise ValueError(f"tensor {name!r} appears twice in one bucket")
        fields[name] = tensor.detach()
    return bytes(encode_tensor_body(fields))


def unpack_tensors(payload: bytes | bytearray | memoryview) -> list[tuple[str, torch.Tensor]]:
    """The `(name, tensor)` pairs of `pack_tensors`, in order, as CPU tensors."""
    body = payload if isinstance(payload, bytearray) else bytearray(payload)  # writable: views, no second copy
    return list(decode_tensor_body(body).items())


def load_each(load: LoadFn, tensors: Sequence[tuple[str, torch.Tensor]], device: torch.device) -> list[dict[str, str]]:
    """Load tensors one by one with `load`; return a report entry `{"name", "message"}` per refused tensor.

    A tensor is refused when the loader raises for it (wrong shape, unknown name) or when it returns an empty
    collection for it (it loaded nothing: the name is not served). Tensors after a refused one are still loaded.
    """
    errors: list[dict[str, str]] = []
    for name, tensor in tensors:
        try:
            loaded = load([(name, tensor.to(device, non_blocking=True))])
        except Exception as e:  # any loader failure is reported by name, as data (the server raises it)
            errors.append({"name": name, "message": f"{type(e).__name__}: {e}".strip()})
            continue
        if loaded is not None and hasattr(loaded, "__len__") and len(loaded) == 0:
            errors.append({"name": name, "message": "the model's load_weights loaded nothing for it (no such tensor)"})
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return errors


def checkpoint_specs(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of every tensor in the `*.safetensors` files of `folder` (headers only).

    Raises:
        FileNotFoundError: `folder` holds no safetensors file (names it).
    """
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors file, so the served tensors' shapes are unknown")
    specs: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                specs[key] = tuple(f.get_slice(key).get_shape())
    return specs


def read_back(model: torch.nn.Module, load: LoadFn, specs: Mapping[str, Sequence[int]]) -> dict[str, torch.Tensor]:
    """The served values of the named tensors, each in the shape it was sent, on the CPU in the served dtype.

    Args:
        model (`torch.nn.Module`): the module whose parameters `load` writes.
        load (`LoadFn`): the model's own loader.
        specs (`Mapping[str, Sequence[int]]`): name -> shape of each tensor to read.

    Raises:
        KeyError: the loader writes no parameter for a name (it is not served).
        ValueError: the loader writes a number of elements other than the tensor's, or writes it transformed
            (sharded under tensor parallelism, permuted): there is no served twin to read back.
    """
    index: dict[tuple[str, tuple[int, ...]], list[tuple[str, torch.Tensor]]] = model.__dict__.setdefault(
        _INDEX_ATTR, {}
    )
    params = {**dict(model.named_buffers()), **dict(model.named_parameters())}  # loaders fill buffers too
    todo = [(name, tuple(int(d) for d in shape)) for name, shape in specs.items()]
    missing = [item for item in todo if item not in index]
    if missing:
        _locate(params, load, missing, index)
    out: dict[str, torch.Tensor] = {}
    for name, shape in todo:
        parts = index[(name, shape)]
        flat = torch.cat([params[p].detach().reshape(-1)[idx.to(params[p].device)] for p, idx in parts])
        value = flat.reshape(shape)
        _check_round_trip(params, load, name, value, parts)
        out[name] = value.to("cpu", copy=True)
    return out


def read_back_reply(
    model: torch.nn.Module, load: LoadFn, folder: str | Path, names: Sequence[str], *, prefix: str = ""
) -> dict[str, Any]:
    """A worker's answer to a read-back call: `{"payload": pack_tensors(...)}` or `{"error": message}`.

    Shapes come from the safetensors files of `folder`, where each name is stored without `prefix`. Errors are
    answered as data (vLLM-Omni's RPC does not raise a worker's exception to the caller).
    """
    try:
        shapes = checkpoint_specs(folder)
        bare = {n: n.removeprefix(prefix) if prefix else n for n in names}
        unknown = [n for n, b in bare.items() if b not in shapes]
        if unknown:
            raise KeyError(f"{unknown[0]!r} is not a tensor of the served checkpoint {folder} ({len(shapes)} are)")
        served = read_back(model, load, {n: shapes[b] for n, b in bare.items()})
    except (KeyError, ValueError, FileNotFoundError) as e:
        return {"error": f"{type(e).__name__}: {e.args[0] if e.args else e}"}
    return {"payload": pack_tensors(served.items())}


def _locate(
    params: dict[str, torch.Tensor],
    load: LoadFn,
    items: list[tuple[str, tuple[int, ...]]],
    index: _Index,
) -> None:
    """Find, with NaN probes, the parameter elements each `(name, shape)` is loaded into; restore every parameter."""
    floating = {n: p for n, p in params.items() if p.is_floating_point()}
    saved = {n: p.detach().to("cpu", copy=True) for n, p in floating.items()}  # the check path: one host copy
    already_nan = {n for n, p in floating.items() if bool(torch.isnan(p.detach()).any())}
    try:
        for name, shape in items:
            probe = torch.full(shape, float("nan"), dtype=torch.float32)
            try:
                loaded = load([(name, probe)])
            except Exception as e:
                raise KeyError(
                    f"tensor {name!r} of shape {list(shape)}: the model's load_weights refuses it ({e})"
                ) from e
            candidates = [n for n in (loaded or ()) if n in floating] if isinstance(loaded, (set, list)) else []
            parts = []
            for pname in candidates or list(floating):
                if pname in already_nan:
                    continue
                hit = torch.isnan(floating[pname].detach().reshape(-1))
                if bool(hit.any()):
                    parts.append((pname, hit.nonzero().reshape(-1).cpu()))
                    floating[pname].data.copy_(saved[pname].to(floating[pname].device))
            count = sum(int(idx.numel()) for _, idx in parts)
            if not parts:
                raise KeyError(f"tensor {name!r} is not served: the model's load_weights writes no parameter for it")
            if count != math.prod(shape):
                raise ValueError(
                    f"tensor {name!r}: the model's loader writes {count} elements for its {math.prod(shape)} "
                    f"(into {[p for p, _ in parts]}); read-back needs an unsharded engine (tensor_parallel_size=1)"
                )
            index[(name, shape)] = parts
    finally:
        for n, p in floating.items():
            p.data.copy_(saved[n].to(p.device))


def _check_round_trip(
    params: dict[str, torch.Tensor],
    load: LoadFn,
    name: str,
    value: torch.Tensor,
    parts: list[tuple[str, torch.Tensor]],
) -> None:
    """Load `value` back; the served elements must not change (they do when the loader transforms the tensor)."""
    before = [params[p].detach().reshape(-1)[idx.to(params[p].device)].clone() for p, idx in parts]
    load([(name, value.clone())])
    after = [params[p].detach().reshape(-1)[idx.to(params[p].device)] for p, idx in parts]
    if not all(torch.equal(a, b) for a, b in zip(after, before)):
        for (p, idx), b in zip(parts, before):
            params[p].data.reshape(-1)[idx.to(params[p].device)] = b
        raise ValueError(
            f"tensor {name!r}: the model's loader transforms it on load (permuted or rescaled), so its served value "
            "cannot be read back under the sent name"
        )
