"""Weight export for the sync: the fast `DiffusersFSDPEngine.export_weights` against the per-tensor export it replaced.

Model: `bench_fsdp_engine`'s random Qwen-Image transformer (preset `qwen-width` on a GPU: the real layer width,
8 layers; `tiny` on the CPU) wrapped by the FSDP2 engine with the Qwen-Image recipe's LoRA (12 targets, rank
`--lora-rank`; r64 on the 8 layers is workload B's adapter, 56.6 M parameters), fp32 master weights; with
`--full`, also the full model without LoRA. Measured in one process:

* `legacy`: the export before this change, per tensor: FSDP2 full-tensor gather, then `.to("cpu", dtype)`
  (a synchronous device-to-host copy of fp32 data, cast on the host), one small copy per tensor;
* `fast_cpu`: `engine.export_weights(dtype, device="cpu")`: gather and cast on the device into one flat buffer, one
  transfer into a pinned host buffer that the engine reuses across calls;
* `fast_device`: `engine.export_weights(dtype, device=<the engine's device>)`: no host hop (in-process rollout;
  GPU only: on the CPU it is the CPU export).

Each export is checked bit-exact against `legacy`. Reported per case: tensors, bytes, median ms per export (over
interleaved rounds), GB/s and the legacy / fast time ratios. JSON goes to `--out`.

    python benchmarks/bench_weight_export.py --device cuda [--full]          # H200: qwen-width, LoRA r64
    python benchmarks/bench_weight_export.py --device cpu                    # tiny, functional check here
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import types
from pathlib import Path

import torch
from bench_fsdp_engine import PRESETS, build_model, machine_name, make_engine, timed


def legacy_export(module: torch.nn.Module, *, lora_only: bool, dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """The per-tensor export that `verl_omni.engine.lora.export_weights` ran before the fast path."""
    out = {}
    for name, tensor in module.state_dict().items():
        is_lora = "lora_" in name
        if is_lora != lora_only:
            continue
        key = name.replace(".default.", ".") if is_lora else name.replace(".base_layer.", ".")
        full = (tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor).detach()
        out[key] = full.to(device="cpu", dtype=dtype or full.dtype, copy=True)
    return out


def measure(engine, device: torch.device, dtype: torch.dtype, iters: int) -> dict[str, float]:
    """Time the three exports of one engine; check the fast ones bit-exact against the legacy one."""
    lora_only = engine.use_lora
    want = legacy_export(engine.module, lora_only=lora_only, dtype=dtype)
    for target in ("cpu", device):
        got = engine.export_weights(dtype=dtype, device=target)
        assert list(got) == list(want), "names differ"
        bad = [k for k in want if got[k].dtype != want[k].dtype or not torch.equal(got[k].cpu(), want[k])]
        assert not bad, f"export to {target} differs from the legacy export: {bad[:3]}"
        del got
    nbytes = sum(t.numel() * t.element_size() for t in want.values())
    fns = {
        "legacy_s": lambda: legacy_export(engine.module, lora_only=lora_only, dtype=dtype),
        "fast_cpu_s": lambda: engine.export_weights(dtype=dtype, device="cpu"),
    }
    if device.type != "cpu":  # on the CPU the device export is the CPU export
        fns["fast_device_s"] = lambda: engine.export_weights(dtype=dtype, device=device)
    for fn in fns.values():  # warm-up: the engine's export buffer, the caching allocators
        timed(fn, device, 1, 1)
    samples = {key: [] for key in fns}
    for _ in range(iters):  # interleaved rounds, median per export: robust to load from other processes
        for key, fn in fns.items():
            samples[key].append(timed(fn, device, 1, 0))
    row: dict[str, float] = {"tensors": len(want), "bytes": nbytes}
    row.update({key: statistics.median(values) for key, values in samples.items()})
    row["legacy_over_fast_cpu"] = row["legacy_s"] / row["fast_cpu_s"]
    if "fast_device_s" in row:
        row["legacy_over_fast_device"] = row["legacy_s"] / row["fast_device_s"]
    return row


def report(name: str, row: dict[str, float], device: torch.device) -> None:
    mb = row["bytes"] / 1e6
    print(f"{name}: {row['tensors']} tensors, {mb:.1f} MB")
    to_cpu = "fast, one transfer to pinned CPU" if device.type != "cpu" else "fast, flat buffer on CPU"
    for key, label in (("legacy_s", "legacy, per tensor to CPU"), ("fast_cpu_s", to_cpu),
                       ("fast_device_s", f"fast, to {device} (no host hop)")):  # fmt: skip
        if key in row:
            s = row[key]
            print(f"  {label:<36} {s * 1e3:8.2f} ms  {row['bytes'] / s / 1e9:6.2f} GB/s")
    ratios = f"{row['legacy_over_fast_cpu']:.1f}x to CPU"
    if "legacy_over_fast_device" in row:
        ratios += f", {row['legacy_over_fast_device']:.1f}x on {device}"
    print(f"  legacy / fast: {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="qwen-width on cuda, tiny on cpu")
    parser.add_argument("--layers", type=int, default=None, help="override the preset's layer count")
    parser.add_argument("--lora-rank", type=int, default=64)
    parser.add_argument("--export-dtype", default="bfloat16", help="dtype of the exported tensors")
    parser.add_argument("--full", action="store_true", help="also the full-model export (no LoRA)")
    parser.add_argument("--iters", type=int, default=15, help="interleaved timing rounds (median)")
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", 0)
    preset_name = args.preset or ("qwen-width" if device.type == "cuda" else "tiny")
    preset = PRESETS[preset_name]
    if args.layers:
        preset = dataclasses.replace(preset, layers=args.layers)
    compute = "bfloat16" if device.type == "cuda" else "float32"
    engine_args = types.SimpleNamespace(
        dtype=compute, grad_ckpt=False, attn_backend=None, device=str(device), compile=False
    )
    dtype = getattr(torch, args.export_dtype)
    results: dict[str, object] = {
        "machine": machine_name(device),
        "torch": torch.__version__,
        "preset": preset_name,
        "layers": preset.layers,
        "export_dtype": args.export_dtype,
        "iters": args.iters,
    }
    print(f"machine: {results['machine']}  torch {torch.__version__}; preset {preset_name}, {preset.layers} layers")
    cases = [("lora", args.lora_rank)] + ([("full", 0)] if args.full else [])
    for name, rank in cases:
        transformer, adapter = build_model(preset, device)
        engine = make_engine(transformer, adapter, preset, engine_args, lora_rank=rank)
        del transformer
        row = measure(engine, device, dtype, args.iters)
        label = f"LoRA r{rank} export ({args.export_dtype})" if rank else f"full export ({args.export_dtype})"
        report(label, row, device)
        results[name] = row
        del engine
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"bench_weight_export_{device.type}_{preset_name}.json"
    path.write_text(json.dumps(results, indent=1))
    print(f"results: {path}")
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
