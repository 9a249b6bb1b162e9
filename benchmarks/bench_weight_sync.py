"""Weight sync throughput and memory: stream a ~1 GiB state dict into an HFHttpServer over loopback.

The server runs in a child process; this process streams the state dict with `RolloutClient.update_weights`
for several bucket sizes and samples the server's RSS every 2 ms. Reported per bucket size: GB/s, the
ratio to an in-process `copy_` of the same tensors (the baseline, measured here), and the server's peak
extra memory against the bucket size (it must stay near one bucket, never a second model copy).

Then HTTP stream vs shared-memory segment (`verl_core.rollout.shm_weights`: write the reused segment, POST
`/update_weights_shm`) into the same server, median of `--repeats` runs each, for the whole state dict and for a
bf16 subset of `--small-mb` MB (a LoRA-sized update): GB/s and the shm/HTTP ratio.

    python benchmarks/bench_weight_sync.py [--buckets-mib 16 64 256] [--layers 18] [--device cpu|cuda] [--out outputs/]
        [--repeats 5] [--small-mb 113]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import tempfile
import threading
import time
from pathlib import Path

import psutil
import torch
from bench_rollout_server import machine_name


def build_model(folder: Path, layers: int) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=layers,
        num_attention_heads=16, num_key_value_heads=4, tie_word_embeddings=False,
    )  # fmt: skip
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    model.save_pretrained(folder)


def serve(folder: str, device: str, queue: mp.Queue, stop: mp.Event) -> None:
    from verl_core.config import RolloutConfig
    from verl_core.rollout.hf import HFHttpServer

    config = RolloutConfig(model={"path": folder}, device=device, max_bucket_bytes=2 << 30)
    server = HFHttpServer(config)
    asyncio.run(server.launch())
    queue.put(server.address)
    stop.wait()
    asyncio.run(server.shutdown())


class RssSampler:
    def __init__(self, pid: int, period: float = 0.002):
        self.proc = psutil.Process(pid)
        self.period = period
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(self.period)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--buckets-mib", type=int, nargs="+", default=[16, 64, 256])
    parser.add_argument("--layers", type=int, default=18, help="18 layers of hidden 1024 ~ 1.0 GiB fp32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="outputs")
    parser.add_argument("--repeats", type=int, default=5, help="runs per transport in the HTTP vs shm comparison")
    parser.add_argument("--small-mb", type=int, default=113, help="size of the bf16 case (a LoRA-sized update)")
    args = parser.parse_args()

    from verl_core.rollout.client import RolloutClient

    folder = Path(tempfile.mkdtemp(prefix="bench-weight-sync-"))
    build_model(folder, args.layers)
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        shapes = {
            k: v.shape
            for k, v in AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)).state_dict().items()
        }
    state = {k: torch.full(s, float(i % 7) * 0.01) for i, (k, s) in enumerate(shapes.items())}
    total = sum(t.numel() * t.element_size() for t in state.values())
    largest = max(t.numel() * t.element_size() for t in state.values())

    # baseline: an in-process copy of the same tensors into preallocated, already touched ones
    dst = {k: torch.zeros_like(t) for k, t in state.items()}
    t0 = time.perf_counter()
    for k, t in state.items():
        dst[k].copy_(t)
    copy_gbps = total / (time.perf_counter() - t0) / 1e9
    del dst

    ctx = mp.get_context("spawn")
    queue, stop = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=serve, args=(str(folder), args.device, queue, stop), daemon=True)
    child.start()
    address = queue.get(timeout=600)
    rows = []

    async def sync(bucket: int, version: int) -> dict:
        client = RolloutClient(address, weight_timeout_s=600)
        try:
            return await client.update_weights(state, version=version, bucket_bytes=bucket)
        finally:
            await client.aclose()

    asyncio.run(sync(16 << 20, 0))  # warm-up
    for version, mib in enumerate(args.buckets_mib, start=1):
        bucket = mib << 20
        time.sleep(0.5)
        before = psutil.Process(child.pid).memory_info().rss
        own_before = psutil.Process().memory_info().rss
        with RssSampler(child.pid) as server_rss, RssSampler(psutil.Process().pid) as client_rss:
            t0 = time.perf_counter()
            result = asyncio.run(sync(bucket, version))
            seconds = time.perf_counter() - t0
        assert result["bytes"] == total and result["weight_version"] == version
        rows.append(
            (mib, result["num_buckets"], total / seconds / 1e9, (server_rss.peak - before) / 2**20,
             (client_rss.peak - own_before) / 2**20)
        )  # fmt: skip
    transports = compare_transports(address, state, args.small_mb, args.repeats, args.buckets_mib[-1] << 20)
    stop.set()
    child.join(timeout=60)

    print(f"machine: {machine_name(args.device)}")
    print(f"state dict: {len(state)} tensors, {total / 2**30:.3f} GiB fp32, largest tensor {largest / 2**20:.0f} MiB")
    print(f"baseline in-process copy_: {copy_gbps:.2f} GB/s")
    print(f"{'bucket MiB':>10s} {'buckets':>8s} {'GB/s':>7s} {'vs copy_':>9s} {'server peak extra MiB':>22s} "
          f"{'extra/bucket':>13s} {'client peak extra MiB':>22s}")  # fmt: skip
    for mib, n, gbps, extra, client_extra in rows:
        print(f"{mib:10d} {n:8d} {gbps:7.2f} {gbps / copy_gbps:9.2f} {extra:22.1f} {extra / mib:13.2f} "
              f"{client_extra:22.1f}")  # fmt: skip
    print(f"HTTP stream vs shm segment, same server, bucket {args.buckets_mib[-1]} MiB, median of {args.repeats}:")
    print(f"{'case':>24s} {'http GB/s':>10s} {'shm GB/s':>9s} {'shm/http':>9s} {'shm write s':>12s} "
          f"{'shm post s':>11s}")  # fmt: skip
    for case, http_s, shm_s, write_s, post_s, size in transports:
        print(f"{case:>24s} {size / http_s / 1e9:10.2f} {size / shm_s / 1e9:9.2f} {http_s / shm_s:9.2f} "
              f"{write_s:12.3f} {post_s:11.3f}")  # fmt: skip
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot([r[0] for r in rows], [r[3] for r in rows], "o-", label="server peak extra RSS")
        ax.plot([r[0] for r in rows], [r[0] for r in rows], "--", label="one bucket")
        ax.axhline(total / 2**20, color="red", ls=":", label="model size (a second copy)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("bucket size (MiB)")
        ax.set_ylabel("MiB")
        ax.legend()
        ax.set_title("weight sync peak extra memory")
        fig.tight_layout()
        path = out / "bench_weight_sync.png"
        fig.savefig(path)
        print(f"chart: {path}")
    except ImportError:
        pass


def compare_transports(
    address: str, state: dict[str, torch.Tensor], small_mb: int, repeats: int, bucket: int
) -> list[tuple[str, float, float, float, float, int]]:
    """Median seconds of HTTP and of shm (segment write + POST, and each part) per case, alternating runs."""
    import statistics

    from verl_core.rollout.client import RolloutClient
    from verl_core.rollout.shm_weights import WeightSegment

    small, size = {}, 0
    for name, t in state.items():  # a bf16 subset of about `small_mb` MB
        if size + t.numel() * 2 > small_mb * 10**6:
            continue
        small[name] = t.to(torch.bfloat16)
        size += t.numel() * 2
    cases = [(f"{_gib(state):.2f} GiB fp32", state), (f"{size / 1e6:.0f} MB bf16", small)]
    segment = WeightSegment()
    version = 1000

    async def post(weights, descriptor) -> dict:
        client = RolloutClient(address, weight_timeout_s=600)
        try:
            if descriptor is None:
                return await client.update_weights(weights, version=version, bucket_bytes=bucket)
            return await client.update_weights_shm(descriptor, version=version, bucket_bytes=bucket)
        finally:
            await client.aclose()

    rows = []
    try:
        for case, weights in cases:
            total = sum(t.numel() * t.element_size() for t in weights.values())
            asyncio.run(post(weights, segment.write(weights)))  # warm-up: the segment exists and is mapped
            http, shm, writes, posts = [], [], [], []
            for _ in range(repeats):
                version += 1
                t0 = time.perf_counter()
                assert asyncio.run(post(weights, None))["bytes"] == total
                http.append(time.perf_counter() - t0)
                version += 1
                t0 = time.perf_counter()
                descriptor = segment.write(weights)
                t1 = time.perf_counter()
                assert asyncio.run(post(weights, descriptor))["bytes"] == total
                shm.append(time.perf_counter() - t0)
                writes.append(t1 - t0)
                posts.append(time.perf_counter() - t1)
            med = statistics.median
            rows.append((case, med(http), med(shm), med(writes), med(posts), total))
    finally:
        segment.close()
    return rows


def _gib(state: dict[str, torch.Tensor]) -> float:
    return sum(t.numel() * t.element_size() for t in state.values()) / 2**30


if __name__ == "__main__":
    main()
