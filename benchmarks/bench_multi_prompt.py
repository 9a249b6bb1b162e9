"""One diffusers server: k prompts x n images as one multi-prompt request against k one-prompt requests.

Paths, interleaved per iteration (same prompts, seeds and sampling; over loopback HTTP through `RolloutClient`):
  perprompt - k one-prompt requests sent together (coalescing off: k pipeline calls of n images; the baseline),
  grouped   - one request with the k prompts (one pipeline call of k*n images).
Reports the median seconds of each, grouped / perprompt, and the largest |latents| difference between the two
(batch rounding only: the rows use the same generators).

    python benchmarks/bench_multi_prompt.py [--device cpu|cuda] [--prompts 2] [--n 8] [--iters 5] [--out outputs/]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from verl_core.rollout.client import RolloutClient
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.rollout import DiffusersHttpServer
from verl_omni.testing import build_tiny_pipeline

PROMPTS = ["a photo of a cat sitting on a red chair", "a lighthouse at dusk over a stormy sea",
           "an astronaut riding a horse", "two dogs playing in the snow"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default="tiny", help="build_tiny_pipeline preset")
    parser.add_argument("--model", default="qwen_image", choices=["qwen_image", "sd3"])
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--height", type=int, default=None, help="default: 64 on CPU, 512 on CUDA")
    parser.add_argument("--steps", type=int, default=None, help="default: 4 on CPU, 10 on CUDA")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--out", default="outputs")
    args = parser.parse_args()
    if not 1 <= args.prompts <= len(PROMPTS):
        raise SystemExit(f"--prompts: 1..{len(PROMPTS)}")
    cuda = args.device.startswith("cuda")
    height = args.height or (512 if cuda else 64)
    steps = args.steps or (10 if cuda else 4)
    folder = build_tiny_pipeline(args.model, Path(tempfile.mkdtemp(prefix="bench-multi-")) / args.model,
                                 preset=args.preset)  # fmt: skip
    pipeline = {"height": height, "width": height, "num_inference_steps": steps, "max_sequence_length": 64}
    algo = {"noise_level": 0.7, "sde_window_size": 2, "sde_window_range": [1, 3]}  # pinned, as the trainer does
    config = DiffusionRolloutConfig(dtype="bfloat16" if cuda else "float32", device=args.device, n=args.n,
                                    pipeline=pipeline, algo=algo, request_timeout_s=3600,
                                    max_response_bytes=8 << 30).with_model(str(folder))  # fmt: skip
    server = DiffusersHttpServer(config)
    asyncio.run(server.launch())
    prompts = PROMPTS[: args.prompts]
    grouped = {"prompt": prompts, "seed": 3}
    singles = [{"prompt": p, "seed": 3 + i * args.n} for i, p in enumerate(prompts)]
    loop = asyncio.new_event_loop()
    client = RolloutClient(server.address, timeout_s=3600, max_response_bytes=8 << 30)

    async def perprompt() -> torch.Tensor:
        out = await asyncio.gather(*(client.generate(r) for r in singles))
        return torch.cat([o["trajectory"]["latents"] for o in out])

    async def group() -> torch.Tensor:
        return (await client.generate(grouped))["trajectory"].reshape(-1)["latents"]

    paths = {"perprompt": perprompt, "grouped": group}
    times: dict[str, list[float]] = {name: [] for name in paths}
    diff = 0.0
    for i in range(args.warmup + args.iters):
        latents = {}
        for name in list(paths)[i % 2 :] + list(paths)[: i % 2]:  # alternate which path runs first
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            latents[name] = loop.run_until_complete(paths[name]())
            if i >= args.warmup:
                times[name].append(time.perf_counter() - t0)
        diff = max(diff, (latents["grouped"].float() - latents["perprompt"].float()).abs().max().item())
    loop.run_until_complete(client.aclose())
    loop.close()
    asyncio.run(server.shutdown())
    median = {name: statistics.median(t) for name, t in times.items()}
    ratio = median["grouped"] / median["perprompt"]
    result = {"device": args.device, "model": args.model, "prompts": args.prompts, "n": args.n, "height": height,
              "steps": steps, "iters": args.iters, "median_s": median, "grouped_over_perprompt": ratio,
              "max_abs_latents_diff": diff}  # fmt: skip
    print(json.dumps(result, indent=2))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"bench_multi_prompt_{args.device.split(':')[0]}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
