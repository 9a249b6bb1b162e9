"""Ray transport of a trainer batch: torch's pickle vs `verl_core.ray_tensors.register_tensor_transport`.

The batch is shaped like workload A's actor batch (16 images, 10 SDE steps of 16x64x64 latents, SD3 prompt and
negative embeddings of 205 x 4096, fp32: 154 MB). Both ways run in one process against one actor: first Ray's
default serialization, then the registered one; the medians and their ratio are printed.

    python benchmarks/bench_ray_tensors.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import ray
import torch
from tensordict import TensorDict
from tqdm import tqdm

from verl_core.ray_tensors import register_tensor_transport


@ray.remote
class Sink:
    def __init__(self, raw: bool) -> None:
        if raw:
            register_tensor_transport()

    def take(self, batch: TensorDict) -> float:
        return float(batch["advantages"].sum())

    def echo(self, batch: TensorDict) -> TensorDict:
        return batch


def make_batch(images: int = 16, steps: int = 10, tokens: int = 205, dim: int = 4096) -> TensorDict:
    return TensorDict(
        {
            "latents": torch.randn(images, steps + 1, 16, 64, 64),
            "prompt_embeds": torch.randn(images, tokens, dim),
            "negative_prompt_embeds": torch.randn(images, tokens, dim),
            "log_probs": torch.randn(images, steps),
            "advantages": torch.randn(images),
        },
        batch_size=[images],
    )


def measure(sink: ray.actor.ActorHandle, batch: TensorDict, repeats: int, label: str) -> dict[str, float]:
    ray.get(sink.take.remote(batch))  # warm-up
    send, round_trip = [], []
    for _ in tqdm(range(repeats), desc=label, leave=False):
        start = time.perf_counter()
        ray.get(sink.take.remote(batch))
        send.append(time.perf_counter() - start)
        start = time.perf_counter()
        ray.get(sink.echo.remote(batch))
        round_trip.append(time.perf_counter() - start)
    return {"send_s": statistics.median(send), "round_trip_s": statistics.median(round_trip)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        batch = make_batch()
        megabytes = sum(v.numel() * v.element_size() for v in batch.values()) / 1e6
        default = measure(Sink.remote(raw=False), batch, args.repeats, "torch pickle")
        register_tensor_transport()  # from here on this process sends raw bytes
        fast = measure(Sink.remote(raw=True), batch, args.repeats, "raw bytes")
    finally:
        ray.shutdown()
    cpu = platform.processor() or platform.machine()
    print(f"machine: {cpu}, {os.cpu_count()} CPUs; batch {megabytes:.0f} MB; median of {args.repeats}")
    for key in ("send_s", "round_trip_s"):
        print(f"{key:<13} pickle {default[key] * 1e3:7.1f} ms   raw bytes {fast[key] * 1e3:7.1f} ms   "
              f"x{default[key] / fast[key]:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
