"""Diffusion rollout server: what moving trajectories as binary tensors costs next to generating them.

Paths, interleaved per iteration so drift hits all equally (same prompt, seed and sampling parameters):
  engine  - `DiffusersRolloutEngine.generate` called directly on this thread (the baseline),
  python  - `await server.generate(...)` (validation, hop onto the server loop, engine thread),
  client  - `RolloutClient.generate` over loopback HTTP: binary encode + HTTP + streamed decode,
  handoff - `RolloutClient(file_handoff=True).generate`: the same body through a /dev/shm file (same host).
Transfer = client - python (handoff - python for the hand-off); overhead = client - engine, also as a ratio of
the engine's generate time; and "transfer alone": the same trajectory through HTTP and through the hand-off from a
server that returns it without generating.
Then the codec alone (`encode_tensor_body` / `decode_tensor_body`) in GB/s on the served trajectory, and on a
synthetic trajectory with the shapes of real Qwen-Image at 512² (A.3 of the reference study: 16 images, latents
(16, 3, 1024, 64) fp32, uint8 images, prompt and negative embeddings (16, 512, 3584) bf16, sent once per request as
the server does), both through the codec and through HTTP and the hand-off (a server whose engine returns that
trajectory), the hand-off both as the client maps it and read into a buffer (the client's way before the mapping).

    python benchmarks/bench_diffusion_server.py [--iters 20] [--device cpu|cuda] [--preset tiny|small|mid]
        [--model qwen_image|sd3] [--height 128] [--n 8] [--steps 10] [--out outputs/]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import mmap
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDict

from verl_core.rollout import handoff
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.tensor_payload import decode_tensor_body, encode_tensor_body
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.pipelines import make_generators
from verl_omni.rollout import DiffusersHttpServer
from verl_omni.testing import build_tiny_pipeline


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


def synthetic_qwen_image_512(n: int = 16) -> TensorDict:
    """A trajectory TensorDict with the shapes and dtypes of real Qwen-Image at 512², SDE window 2, true CFG."""
    gen = torch.Generator().manual_seed(0)
    f32 = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return TensorDict(
        {
            "latents": f32(n, 3, 1024, 64),
            "log_probs": f32(n, 2),
            "timesteps": f32(n, 2),
            "step_indices": torch.zeros(n, 2, dtype=torch.long),
            "sigmas": f32(n, 2),
            "sigmas_next": f32(n, 2),
            "images": torch.randint(0, 255, (n, 3, 512, 512), dtype=torch.uint8, generator=gen),
            # one prompt per request: the server sends its conditioning as one row expanded over the n rows
            "prompt_embeds": f32(1, 512, 3584).bfloat16().expand(n, 512, 3584),
            "prompt_embeds_mask": torch.ones(1, 512, dtype=torch.long).expand(n, 512),
            "negative_prompt_embeds": f32(1, 512, 3584).bfloat16().expand(n, 512, 3584),
            "negative_prompt_embeds_mask": torch.ones(1, 512, dtype=torch.long).expand(n, 512),
            "prompt_index": torch.zeros(n, dtype=torch.long),
        },
        batch_size=[n],
    )


class PayloadServer(DiffusersHttpServer):
    """Returns a fixed trajectory without running the pipeline (measures HTTP + codec on a large payload)."""

    payload: TensorDict

    async def _engine_generate(self, request_id: str, request: Any, params: Any) -> dict[str, Any]:
        return {"finish_reason": "stop", "seed": 0, "trajectory": self.payload}


def codec_rates(trajectory: TensorDict, repeats: int) -> dict[str, float]:
    """Encode / in-place decode times (median) and GB/s of a trajectory."""
    fields = {"finish_reason": "stop", "weight_version": 0, "trajectory": trajectory}
    enc, dec = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        body = encode_tensor_body(fields)
        t1 = time.perf_counter()
        decode_tensor_body(body)
        dec.append(time.perf_counter() - t1)
        enc.append(t1 - t0)
    nbytes = len(body)
    return {
        "bytes": nbytes,
        "encode_ms": statistics.median(enc) * 1e3,
        "decode_ms": statistics.median(dec) * 1e3,
        "encode_gbps": nbytes / statistics.median(enc) / 1e9,
        "decode_gbps": nbytes / statistics.median(dec) / 1e9,
    }


async def round_trips(address: str, request: dict, repeats: int) -> dict[str, list[float]]:
    """Round-trip times through the HTTP body ("http"), the tmpfs hand-off as the client maps it ("handoff") and
    the hand-off read into a buffer ("handoff_read", the client before the mapping), in rotating order."""
    clients = {
        "http": RolloutClient(address, timeout_s=600, max_response_bytes=8 << 30),
        "handoff": RolloutClient(address, timeout_s=600, max_response_bytes=8 << 30, file_handoff=True),
        "handoff_read": RolloutClient(address, timeout_s=600, max_response_bytes=8 << 30, file_handoff=True),
    }
    times: dict[str, list[float]] = {name: [] for name in clients}
    names = list(clients)
    try:
        for i in range(repeats):
            for name in names[i % 3 :] + names[: i % 3]:
                handoff._CAN_MAP = name != "handoff_read" and hasattr(mmap, "MAP_PRIVATE")
                t0 = time.perf_counter()
                await clients[name].generate(request)
                times[name].append(time.perf_counter() - t0)
    finally:
        handoff._CAN_MAP = hasattr(mmap, "MAP_PRIVATE")
        for client in clients.values():
            await client.aclose()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", default="qwen_image", choices=["qwen_image", "sd3"])
    parser.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    parser.add_argument("--height", type=int, default=None, help="default: 128 on CPU, 512 on CUDA")
    parser.add_argument("--n", type=int, default=None, help="images per request; default: 8 on CPU, 16 on CUDA")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--cfg", type=float, default=4.0, help="true CFG (Qwen-Image) / CFG (SD3) weight")
    parser.add_argument("--max-sequence-length", type=int, default=64)
    parser.add_argument("--synthetic-repeats", type=int, default=5)
    parser.add_argument("--out", default="outputs")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    height = args.height or (512 if cuda else 128)
    n = args.n or (16 if cuda else 8)
    dtype = args.dtype or ("bfloat16" if cuda else "float32")

    folder = build_tiny_pipeline(args.model, Path(tempfile.mkdtemp(prefix="bench-diffusion-")) / args.model,
                                 preset=args.preset)  # fmt: skip
    guidance = {"true_cfg_scale": args.cfg} if args.model == "qwen_image" else {"guidance_scale": args.cfg}
    pipeline = {"height": height, "width": height, "num_inference_steps": args.steps,
                "max_sequence_length": args.max_sequence_length, **guidance}  # fmt: skip
    algo = {"noise_level": 0.7, "sde_window_size": 2, "sde_window_range": [0, 5]}
    config = DiffusionRolloutConfig(dtype=dtype, device=args.device, n=n, pipeline=pipeline, algo=algo,
                                    request_timeout_s=3600, max_response_bytes=8 << 30)  # fmt: skip
    config = config.with_model(str(folder))
    server = DiffusersHttpServer(config)
    asyncio.run(server.launch())
    sampling = config.sampling_config(args.model).evolve(sde_window_range=[1, 3])  # a pinned window
    params = {k: v for k, v in sampling.to_dict().items() if k not in ("seed", "negative_prompt")}
    request = {"prompt": "a photo of a cat sitting on a red chair", "seed": 3, "sampling_params": params}
    engine = server._engine
    times: dict[str, list[float]] = {"engine": [], "python": [], "client": [], "handoff": []}
    loop = asyncio.new_event_loop()
    client = RolloutClient(server.address, timeout_s=3600, max_response_bytes=8 << 30)
    handoff = RolloutClient(server.address, timeout_s=3600, max_response_bytes=8 << 30, file_handoff=True)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def run_engine() -> Any:
        return engine.generate([request["prompt"]], sampling, make_generators(3, n, engine.device)).to("cpu")

    paths = {
        "engine": run_engine,
        "python": lambda: loop.run_until_complete(server.generate(request)).trajectory,
        "client": lambda: loop.run_until_complete(client.generate(request))["trajectory"],
        "handoff": lambda: loop.run_until_complete(handoff.generate(request))["trajectory"],
    }
    names = list(paths)
    for i in range(args.warmup + args.iters):
        outputs = {}
        for name in names[i % len(names) :] + names[: i % len(names)]:  # rotate the order: no path always runs first
            sync()
            t0 = time.perf_counter()
            outputs[name] = paths[name]()
            sync()
            if i >= args.warmup:
                times[name].append(time.perf_counter() - t0)
        if i == 0 and not cuda:  # same numbers on every path (CPU kernels are deterministic)
            assert torch.equal(outputs["engine"]["latents"], outputs["python"]["latents"])
            assert torch.equal(outputs["engine"]["latents"], outputs["client"]["latents"])
            assert torch.equal(outputs["engine"]["latents"], outputs["handoff"]["latents"])
    trajectory = outputs["python"]
    loop.run_until_complete(client.aclose())
    loop.run_until_complete(handoff.aclose())
    loop.close()
    served = codec_rates(trajectory, max(args.iters, 5))
    asyncio.run(server.shutdown())
    # the same trajectory through HTTP with no generation around it: transfer alone, free of generate noise
    echo = PayloadServer(config)
    echo.payload = trajectory
    asyncio.run(echo.launch())
    alone = asyncio.run(round_trips(echo.address, request, max(args.iters, 5) * 5))
    echo_s, echo_handoff_s = statistics.median(alone["http"]), statistics.median(alone["handoff"])
    asyncio.run(echo.shutdown())

    med = {k: statistics.median(v) for k, v in times.items()}
    transfer, overhead = med["client"] - med["python"], med["client"] - med["engine"]
    handoff_transfer = med["handoff"] - med["python"]
    print(f"machine: {machine_name(args.device)}")
    setting = f"{args.model} preset {args.preset} ({dtype}), {height}², n={n}, {args.steps} steps, window 2"
    print(f"{setting}, CFG {args.cfg}, {args.iters} iterations; medians")
    for name, value in med.items():
        print(f"  {name:7s} {value * 1e3:9.2f} ms  ({value / med['engine']:.3f} x engine)")
    print(
        f"  trajectory: {served['bytes'] / n / 1024:.1f} KiB per image ({served['bytes'] / 1024:.1f} KiB per request)"
    )
    print(f"  transfer (client - python): {transfer * 1e3:.2f} ms = {transfer / med['engine'] * 100:.2f} % of generate")
    print(f"  transfer via hand-off (handoff - python): {handoff_transfer * 1e3:.2f} ms = "
          f"{handoff_transfer / med['engine'] * 100:.2f} % of generate")  # fmt: skip
    print(f"  transfer alone (HTTP round trip of this trajectory, no generation): {echo_s * 1e3:.2f} ms = "
          f"{echo_s / med['engine'] * 100:.3f} % of generate")  # fmt: skip
    print(f"  transfer alone via hand-off: {echo_handoff_s * 1e3:.2f} ms = {echo_handoff_s / med['engine'] * 100:.3f} "
          f"% of generate (HTTP / hand-off = {echo_s / echo_handoff_s:.2f})")  # fmt: skip
    print(f"  overhead (client - engine): {overhead * 1e3:.2f} ms = {overhead / med['engine'] * 100:.2f} % of generate")
    print(f"  codec on it: encode {served['encode_ms']:.3f} ms ({served['encode_gbps']:.2f} GB/s), "
          f"decode {served['decode_ms']:.3f} ms ({served['decode_gbps']:.2f} GB/s)")  # fmt: skip

    real = synthetic_qwen_image_512()
    synthetic = codec_rates(real, args.synthetic_repeats)
    payload_server = PayloadServer(config)
    payload_server.payload = real
    asyncio.run(payload_server.launch())
    http = asyncio.run(round_trips(payload_server.address, request, args.synthetic_repeats))
    asyncio.run(payload_server.shutdown())
    http_s, handoff_s = statistics.median(http["http"]), statistics.median(http["handoff"])
    handoff_read_s = statistics.median(http["handoff_read"])
    print(f"synthetic real Qwen-Image 512² trajectory, 16 images: {synthetic['bytes'] / 2**20:.1f} MiB")
    print(f"  codec: encode {synthetic['encode_ms']:.1f} ms ({synthetic['encode_gbps']:.2f} GB/s), "
          f"decode {synthetic['decode_ms']:.2f} ms ({synthetic['decode_gbps']:.1f} GB/s)")  # fmt: skip
    print(f"  HTTP round trip (encode + loopback + streamed decode): {http_s * 1e3:.1f} ms "
          f"({synthetic['bytes'] / http_s / 1e9:.2f} GB/s)")  # fmt: skip
    print(f"  hand-off round trip (encode into /dev/shm + map + decode): {handoff_s * 1e3:.1f} ms "
          f"({synthetic['bytes'] / handoff_s / 1e9:.2f} GB/s); HTTP / hand-off = {http_s / handoff_s:.2f}")  # fmt: skip
    print(f"  hand-off read into a buffer (the client before the mapping): {handoff_read_s * 1e3:.1f} ms; "
          f"read / mapped = {handoff_read_s / handoff_s:.2f}")  # fmt: skip

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "machine": machine_name(args.device),
        "setting": {
            "model": args.model,
            "preset": args.preset,
            "dtype": dtype,
            "height": height,
            "n": n,
            "steps": args.steps,
            "cfg": args.cfg,
            "iters": args.iters,
        },
        "median_s": med,
        "transfer_ratio": transfer / med["engine"],
        "transfer_alone_s": echo_s,
        "transfer_alone_ratio": echo_s / med["engine"],
        "handoff_transfer_ratio": handoff_transfer / med["engine"],
        "transfer_alone_handoff_s": echo_handoff_s,
        "transfer_alone_http_over_handoff": echo_s / echo_handoff_s,
        "overhead_ratio": overhead / med["engine"],
        "served_codec": served,
        "synthetic_codec": synthetic,
        "synthetic_http_s": http_s,
        "synthetic_handoff_s": handoff_s,
        "synthetic_http_over_handoff": http_s / handoff_s,
        "synthetic_handoff_read_s": handoff_read_s,
        "synthetic_handoff_read_over_mapped": handoff_read_s / handoff_s,
    }
    path = out / "bench_diffusion_server.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
