"""Where a LoRA weight sync into the `diffusers` rollout server spends its time, part by part, in one process.

A `DiffusersHttpServer` on the trainer workload's pipeline (`--preset a|b|tiny`, see trainer_workload_parts.py)
gets the workload's LoRA (bf16 on cuda, as the trainer sends it) pushed repeatedly; medians of `--repeats`:

- `push_shm`:    `WeightPusher.push` over the shared-memory segment (the path for a same-host server on another GPU)
- `push_http`:   the same over the HTTP stream (`transport="http"`)
- on CUDA, from a second process as the trainer's rank 0 pushes: `child_push_shm` (pinned host tensors, through
  the segment) against `child_push_cuda_ipc` (the same tensors on the GPU, shared by CUDA IPC: the trainer's path
  when the server shares rank 0's GPU), and `same_process_cuda_ipc`: what a push of GPU tensors from the server's
  own process does (CUDA cannot open a process's own IPC handles: the pusher falls back to the segment)
- `engine`:      `DiffusersRolloutEngine.update_weights` called directly (the server's work without transport)
- `engine_per_tensor`: the baseline for `engine`: one `param.copy_(t.to(device))` per tensor, then the re-merge
- `merge`:       a `lora_merge.MergePlan` of every wrapped layer, run (what the engine does after each update; on
                 CUDA one Triton kernel per layer layout)
- `merge_torch`: the same plan with `kernel=False`: torch ops only (the float32 delta written, then added)
- `merge_peft`:  peft's own reset + `Linear.merge()` per layer (the baseline; `merge_torch` is bit-identical)

plus a cProfile of one `engine` call (top functions by own time), and on CUDA the engine's sleep / wake after a
LoRA update (`sleep`, `wake`: copies only what changed, drops the merged weights) against `sleep_full` /
`wake_full` (every tensor copied both ways, the behaviour before), with the bytes each sleep copied.

    python benchmarks/bench_lora_sync.py --preset a --device cuda [--repeats 10] [--out outputs/]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pathlib
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import torch
from bench_rollout_server import machine_name
from trainer_workload_parts import PRESETS, build_pipeline_folder, lora_targets


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    """Median wall seconds of `fn` (device work included), after one unmeasured call."""
    fn()
    _sync(device)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def peft_merge(layers: list[torch.nn.Module]) -> None:
    """peft's way: reset each layer from its pristine copies, then `layer.merge()`."""
    from verl_omni.rollout.lora import merge as lora_merge

    for layer in layers:
        lora_merge._reset(layer, lora_merge._pristine(layer))
        layer.merge()


def per_tensor_update(engine: Any, tensors: dict[str, torch.Tensor]) -> None:
    """The update before staged transfers: each host tensor moved and cast on its own, then the re-merge."""
    from verl_omni.rollout.diffusers.engine import canonical_weight_name

    table = engine.weight_table(lora=True)
    with torch.no_grad():
        for name, t in tensors.items():
            param = table[canonical_weight_name(name)]
            param.copy_(t.to(device=param.device, dtype=param.dtype))
    engine.remerge_lora()


def sleep_cycle(engine: Any, tensors: dict[str, torch.Tensor], lora_config: Any, *, full: bool, repeats: int) -> dict:
    """Median sleep and wake seconds after a LoRA update; `full`: copy every tensor both ways (the old behaviour)."""
    from verl_omni.rollout.diffusers.host_offload import module_tensors

    sleeps, wakes, copied = [], [], 0
    for _ in range(repeats + 1):
        engine.update_weights(tensors, lora_config=lora_config)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if full:
            engine._host.mark_written(module_tensors(engine.offload_modules()))
            engine._host.offload(engine.offload_modules())
        else:
            engine.sleep()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        engine.wake_up()
        torch.cuda.synchronize()
        sleeps.append(t1 - t0)
        wakes.append(time.perf_counter() - t1)
        copied = engine._host.copied_bytes
    return {"sleep": statistics.median(sleeps[1:]), "wake": statistics.median(wakes[1:]), "copied_bytes": copied}


_CHILD = """
import json, statistics, sys, time
import torch
from verl_core.rollout.weight_push import WeightPusher

address, saved, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
tensors, peft_config, bucket = torch.load(saved)
sizes = [t.numel() for t in tensors.values()]
flat = torch.cat([t.reshape(-1) for t in tensors.values()])  # one flat buffer, as the engine exports
views = lambda buf: {n: p.view(t.shape) for (n, t), p in zip(tensors.items(), buf.split(sizes))}
sources = {"shm": views(flat.pin_memory()), "cuda_ipc": views(flat.cuda())}
pusher, version, out = WeightPusher("auto"), 10**6, {}
for kind, weights in sources.items():
    times, counts = [], None
    for i in range(repeats + 1):
        version += 1
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        counts = pusher.push([address], weights, version=version, peft_config=peft_config, bucket_bytes=bucket,
                             timeout_s=120.0)
        times.append(time.perf_counter() - t0)
    out["child_push_" + kind] = statistics.median(times[1:])
    if kind == "cuda_ipc":  # the sender's share of it: the handles
        from verl_core.rollout.cuda_ipc_weights import share_cuda
        shares = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            share_cuda(weights)
            shares.append(time.perf_counter() - t0)
        out["child_share_cuda"] = statistics.median(shares)
    out[kind + "_counts"] = counts
pusher.close()
print(json.dumps(out))
"""


def child_pushes(address: str, tensors: dict, peft_config: dict, bucket: int, repeats: int) -> dict[str, Any]:
    """Median push seconds from a second process (the trainer's rank 0): host tensors via shm vs GPU via IPC."""
    import os
    import subprocess
    import sys

    with tempfile.TemporaryDirectory() as tmp:
        saved = os.path.join(tmp, "lora.pt")
        torch.save((tensors, peft_config, bucket), saved)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        argv = [sys.executable, "-c", _CHILD, address, saved, str(repeats)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=540, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the pushing process failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default=None, help="folder for bench_lora_sync_<device>_<preset>.json")
    args = parser.parse_args(argv)

    from verl_core.rollout.weight_push import WeightPusher
    from verl_core.testing.server_contract import run
    from verl_omni.config import DiffusionRolloutConfig
    from verl_omni.rollout import DiffusersHttpServer
    from verl_omni.rollout.lora import merge as lora_merge
    from verl_omni.testing import random_transformer_lora

    w = PRESETS[args.preset]
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    tmp = tempfile.TemporaryDirectory()
    folder = build_pipeline_folder(w, pathlib.Path(tmp.name) / "pipe", dtype)
    lora = {"r": w.lora_rank, "lora_alpha": w.lora_alpha, "target_modules": lora_targets(w)}
    tensors, peft_config = random_transformer_lora(folder, seed=0, config=lora, std=0.01)
    tensors = {k: v.to(dtype) for k, v in tensors.items()}  # the trainer sends the rollout's dtype
    size = sum(t.numel() * t.element_size() for t in tensors.values())

    pipeline = {"height": w.height, "width": w.width, "num_inference_steps": w.steps}
    config = DiffusionRolloutConfig(
        dtype=str(dtype).removeprefix("torch."), device=args.device, pipeline=pipeline, n=w.n
    ).with_model(str(folder))
    server = DiffusersHttpServer(config)
    run(server.launch())
    engine = server._require_engine("bench")
    version = iter(range(1, 10**6))
    shm, http = WeightPusher("auto"), WeightPusher("http")

    def push(pusher: WeightPusher) -> None:
        pusher.push(
            [server.address], tensors, version=next(version), peft_config=peft_config,
            bucket_bytes=config.update_weights_bucket_bytes, timeout_s=120.0,
        )  # fmt: skip

    from peft import LoraConfig

    lora_config = LoraConfig(**peft_config)
    results: dict[str, float] = {}
    copied: dict[str, int] = {}
    counts: dict[str, Any] = {}  # which transport each pusher used
    try:
        results["push_shm"] = timed(lambda: push(shm), device, args.repeats)
        results["push_http"] = timed(lambda: push(http), device, args.repeats)
        if device.type == "cuda":
            child = child_pushes(server.address, tensors, peft_config, config.update_weights_bucket_bytes, args.repeats)
            results["child_push_shm"], results["child_push_cuda_ipc"] = (
                child["child_push_shm"],
                child["child_push_cuda_ipc"],
            )
            counts["child_shm"], counts["child_cuda_ipc"] = child["shm_counts"], child["cuda_ipc_counts"]
            on_gpu = {n: t.to(device) for n, t in tensors.items()}
            counts["same_process_cuda_ipc"] = shm.push(
                [server.address], on_gpu, version=next(version), peft_config=peft_config,
                bucket_bytes=config.update_weights_bucket_bytes, timeout_s=120.0,
            )  # fmt: skip
        results["engine"] = timed(lambda: engine.update_weights(tensors, lora_config=lora_config), device, args.repeats)
        results["engine_per_tensor"] = timed(lambda: per_tensor_update(engine, tensors), device, args.repeats)
        layers = list(lora_merge.wrapped_layers(engine.transformer).values())
        plan, torch_plan = lora_merge.MergePlan(layers), lora_merge.MergePlan(layers, kernel=False)  # as the engine
        results["merge"] = timed(plan.run, device, args.repeats)
        results["merge_torch"] = timed(torch_plan.run, device, args.repeats)
        results["merge_peft"] = timed(lambda: peft_merge(layers), device, args.repeats)
        profile = cProfile.Profile()
        profile.enable()
        engine.update_weights(tensors, lora_config=lora_config)
        _sync(device)
        profile.disable()
        if device.type == "cuda":
            for full in (False, True):
                cycle = sleep_cycle(engine, tensors, lora_config, full=full, repeats=args.repeats)
                suffix = "_full" if full else ""
                results[f"sleep{suffix}"], results[f"wake{suffix}"] = cycle["sleep"], cycle["wake"]
                copied[f"sleep{suffix}"] = cycle["copied_bytes"]
    finally:
        shm.close()
        run(server.shutdown())
        tmp.cleanup()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(15)

    where = f"{machine_name(args.device)} ({dtype})"
    print(f"preset {args.preset} on {where}: LoRA {len(tensors)} tensors, {size / 1e6:.1f} MB")
    for name, seconds in results.items():
        print(f"  {name:<11} {seconds * 1e3:8.2f} ms")
    print(f"  merge / merge_peft = {results['merge'] / results['merge_peft']:.2f}x")
    print(f"  merge / merge_torch = {results['merge'] / results['merge_torch']:.2f}x")
    print(f"  engine / engine_per_tensor = {results['engine'] / results['engine_per_tensor']:.2f}x")
    if "child_push_cuda_ipc" in results:
        ratio = results["child_push_shm"] / results["child_push_cuda_ipc"]
        print(f"  second process: cuda_ipc {ratio:.2f}x faster than shm; transports used: {counts}")
    for name, nbytes in copied.items():
        print(f"  {name} copied {nbytes / 1e6:.1f} MB to the host")
    print("cProfile of one engine.update_weights call, by own time:")
    print("\n".join(text.getvalue().splitlines()[:32]))
    out = {
        "preset": args.preset, "device": machine_name(args.device), "dtype": str(dtype), "tensors": len(tensors),
        "bytes": size, "repeats": args.repeats, "median_s": results, "sleep_copied_bytes": copied,
        "transports": counts,
    }  # fmt: skip
    if args.out:
        path = pathlib.Path(args.out) / f"bench_lora_sync_{device.type}_{args.preset}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1))
        print(f"wrote {path}")
    return out


if __name__ == "__main__":
    main()
