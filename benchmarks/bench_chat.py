"""Chat requests/s of a reward-model server: verl-core's `/v1/chat/completions` against a baseline in the same run.

A tiny random Qwen2.5-VL answers image questions (an OCR-style prompt with one image as a base64 data URL, as the
`ocr` and `vlm_judge` rewards send them), `--concurrency` requests in flight, `--requests` in all, per path:
  vllm (GPU):  ours    - `/v1/chat/completions` (request checks, image decode check, capacity, forward)
               vllm    - vLLM's own OpenAI app mounted at `/openai/v1/chat/completions` (the baseline)
  hf (CPU):    ours    - `/v1/chat/completions` with the image
               text    - the same request without the image (the baseline: what the vision tower costs)
Prints requests/s and p50 latency per path, and ours / baseline. Paths alternate in rounds so drift hits both.

    python benchmarks/bench_chat.py --backend hf --device cpu [--requests 32 --concurrency 8]
    python benchmarks/bench_chat.py --backend vllm --device cuda --requests 512 --concurrency 64 --out outputs/
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import openai
from PIL import Image

from verl_core.config import RolloutConfig
from verl_core.testing.server_contract import run
from verl_core.testing.tiny_llm import build_tiny_vlm


def _image_url(seed: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), ((37 * seed) % 256, (91 * seed) % 256, 120)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _messages(seed: int, with_image: bool) -> list[dict]:
    text = {"type": "text", "text": "Please output only the text content from the image without any other text."}
    parts = [{"type": "image_url", "image_url": {"url": _image_url(seed)}}, text] if with_image else [text]
    return [{"role": "user", "content": parts}]


async def _round(base_url: str, n: int, concurrency: int, max_tokens: int, with_image: bool) -> list[float]:
    """Send `n` chat requests, `concurrency` at a time; return each one's latency in seconds."""
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(trust_env=False, timeout=120, limits=httpx.Limits(max_connections=concurrency)) as h:
        client = openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, http_client=h)

        async def one(i: int) -> float:
            async with limit:
                t0 = time.perf_counter()
                answer = await client.chat.completions.create(
                    model="verl",
                    messages=_messages(i, with_image),
                    max_tokens=max_tokens,
                    temperature=1.0,
                    seed=i,  # the same seeds on both paths: the same answers, the same lengths
                )
                assert answer.choices, answer
                return time.perf_counter() - t0

        return list(await asyncio.gather(*(one(i) for i in range(n))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    folder = build_tiny_vlm(tempfile.mkdtemp(prefix="bench-tiny-vlm-"), hidden_size=args.hidden_size, vision_heads=4)
    if args.backend == "vllm":
        from verl_core.rollout.vllm import vLLMHttpServer

        config = RolloutConfig(
            model={"path": str(folder)}, name="vllm", device=args.device, gpu_memory_utilization=0.3,
            enforce_eager=False, max_model_len=512, request_timeout_s=120, max_request_bytes=64 << 20,
        )  # fmt: skip
        server = vLLMHttpServer(config)
        paths = {"ours": True, "vllm": True}  # path -> with the image
    else:
        from verl_core.rollout.hf import HFHttpServer

        config = RolloutConfig(model={"path": str(folder)}, device=args.device, request_timeout_s=120)
        server = HFHttpServer(config)
        paths = {"ours": True, "text": False}
    run(server.launch())
    try:
        urls = {"ours": server.address + "/v1", "vllm": server.address + "/openai/v1", "text": server.address + "/v1"}
        asyncio.run(_round(urls["ours"], args.concurrency, args.concurrency, args.max_tokens, True))  # warm-up
        latencies: dict[str, list[float]] = {name: [] for name in paths}
        seconds: dict[str, float] = dict.fromkeys(paths, 0.0)
        for r in range(args.rounds):
            for name, with_image in paths.items():
                t0 = time.perf_counter()
                latencies[name] += asyncio.run(
                    _round(urls[name], args.requests, args.concurrency, args.max_tokens, with_image)
                )
                seconds[name] += time.perf_counter() - t0
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    finally:
        run(server.shutdown())

    base = "vllm" if args.backend == "vllm" else "text"
    result = {
        "backend": args.backend,
        "device": args.device,
        "requests_per_round": args.requests,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "paths": {
            name: {
                "requests_per_s": args.requests * args.rounds / seconds[name],
                "p50_latency_s": statistics.median(latencies[name]),
            }
            for name in paths
        },
    }
    result["ours_vs_baseline"] = result["paths"]["ours"]["requests_per_s"] / result["paths"][base]["requests_per_s"]
    for name, row in result["paths"].items():
        print(f"{name:>5}: {row['requests_per_s']:8.1f} requests/s   p50 {1000 * row['p50_latency_s']:7.1f} ms")
    print(f"ours / {base}: {result['ours_vs_baseline']:.3f}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"chat_{args.backend}.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
