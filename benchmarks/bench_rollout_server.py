"""Rollout server overhead: generate through HTTP vs the same engine call in-process, tiny random LLM.

Three paths, interleaved per iteration so drift hits all equally:
  engine  - HFHttpServer's engine function called directly on this thread (the baseline),
  python  - `await server.generate(...)` (validation, hop onto the server loop, engine thread),
  http    - POST /generate over loopback with a keep-alive httpx client (adds JSON + uvicorn),
  client  - the same through `RolloutClient` (async httpx), what routers and trainers use.
Prints p50/p99 per path, the overhead over the baseline and the ratio; target: http p50 overhead < 5 ms.

    python benchmarks/bench_rollout_server.py [--iters 300] [--max-tokens 8] [--device cpu|cuda] [--out outputs/]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.tiny_llm import build_tiny_llm


def machine_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({torch.get_num_threads()} torch threads)"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="outputs")
    args = parser.parse_args()

    folder = build_tiny_llm(tempfile.mkdtemp(prefix="bench-tiny-llm-"))
    config = RolloutConfig(model={"path": str(folder)}, device=args.device)
    server = HFHttpServer(config)
    asyncio.run(server.launch())
    sampling = {"max_tokens": args.max_tokens, "temperature": 0.0, "ignore_eos": True}
    request = {"prompt_ids": [4, 5, 6, 7, 8, 9, 10, 11], "sampling_params": sampling}
    params = server._validate_sampling_params(sampling)  # exactly what the server's generate runs with
    flag = threading.Event()
    times: dict[str, list[float]] = {"engine": [], "python": [], "http": [], "client": []}
    loop = asyncio.new_event_loop()
    client = RolloutClient(server.address)
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    with httpx.Client(base_url=server.address, trust_env=False, timeout=60, transport=transport) as http:
        for i in range(args.warmup + args.iters):
            t0 = time.perf_counter()
            direct = server._generate_blocking(request["prompt_ids"], params, None, flag)
            t1 = time.perf_counter()
            via_python = loop.run_until_complete(server.generate(request))
            t2 = time.perf_counter()
            via_http = http.post("/generate", json=request).json()
            t3 = time.perf_counter()
            via_client = loop.run_until_complete(client.generate(request))
            t4 = time.perf_counter()
            assert direct["token_ids"] == via_python.token_ids == via_http["token_ids"] == via_client["token_ids"]
            if i >= args.warmup:
                times["engine"].append(t1 - t0)
                times["python"].append(t2 - t1)
                times["http"].append(t3 - t2)
                times["client"].append(t4 - t3)
    loop.run_until_complete(client.aclose())
    loop.close()
    asyncio.run(server.shutdown())

    base50, base99 = pct(times["engine"], 0.5), pct(times["engine"], 0.99)
    print(f"machine: {machine_name(args.device)}")
    print(f"tiny Qwen2 (hidden 32, 2 layers), prompt 8 tokens, {args.max_tokens} new tokens, {args.iters} iterations")
    print(f"{'path':8s} {'p50 ms':>8s} {'p99 ms':>8s} {'mean ms':>8s} {'p50 overhead ms':>16s} {'p50 ratio':>10s}")
    for name, values in times.items():
        p50, p99 = pct(values, 0.5), pct(values, 0.99)
        print(
            f"{name:8s} {p50 * 1e3:8.2f} {p99 * 1e3:8.2f} {statistics.mean(values) * 1e3:8.2f} "
            f"{(p50 - base50) * 1e3:16.2f} {p50 / base50:10.2f}"
        )
    for name in ("http", "client"):
        overhead = (pct(times[name], 0.5) - base50) * 1e3
        print(f"{name} p50 overhead {overhead:.2f} ms (target < 5 ms): {'PASS' if overhead < 5 else 'FAIL'}")
    print(f"engine baseline p99 {base99 * 1e3:.2f} ms")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.boxplot([[v * 1e3 for v in times[k]] for k in times], tick_labels=list(times), showfliers=False)
        ax.set_ylabel("latency per generate (ms)")
        ax.set_title(f"rollout server overhead, {machine_name(args.device)[:40]}")
        path = out / "bench_rollout_server.png"
        fig.tight_layout()
        fig.savefig(path)
        print(f"chart: {path}")
    except ImportError:
        pass


if __name__ == "__main__":
    main()
