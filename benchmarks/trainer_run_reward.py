"""The OCR recipe's reward model for `bench_trainer_run.py --reward-model tiny|mid` (issue 27's reward stage).

The workload's images are scored by the built-in `ocr` reward (`verl_omni.reward.ocr.compute_score_ocr`): a random
Qwen2.5-VL (`verl_core.testing.tiny_llm.build_tiny_vlm`) served by verl-core's rollout servers transcribes each image
and the score is 1 - the normalised edit distance to the prompt's `ground_truth`. The answers of a random model are
noise; what the benchmark measures is what the reward stage costs the step, and how much of it `reward.stream`
hides behind generation. Variant parts of `bench_trainer_run.VARIANTS` choose the placement and the mode:
`stream` (each prompt its own request, scored while the others generate; compare it with `perprompt`, which has the
same requests without streaming), `rm-vllm` (verl-core's vLLM server instead of the HF one) and `rm-pool` (the reward
model on a GPU of its own: needs 2 GPUs).

    python benchmarks/bench_trainer_run.py --preset a --reward-model mid --variants perprompt,perprompt+stream \
        --skip-baseline                                                          # H200, HF reward server
    python benchmarks/bench_trainer_run.py --preset tiny --device cpu --reward-model tiny \
        --variants perprompt,perprompt+stream --skip-baseline --warmup 1 --steps 2   # CPU, a few minutes
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

REWARD_MODELS: dict[str, dict[str, Any]] = {
    # vLLM's attention needs a head size >= 32: 256 / 4 = 64; images of at most 56x56 pixels (1-4 image tokens)
    "tiny": {"hidden_size": 256, "num_heads": 4, "vision_heads": 4},
    # a Qwen2.5-VL-2B-like width (about 1.3 B parameters): 24 decoder layers of 2048, a 8-block vision tower,
    # images resized to at most 448x448 pixels (256 image tokens), std 0.02 so bf16 activations stay finite
    "mid": {"hidden_size": 2048, "num_heads": 16, "vision_heads": 16, "num_layers": 24, "vision_depth": 8,
            "max_pixels": 448 * 448, "init_std": 0.02, "dtype": "bfloat16"},
}  # fmt: skip
"""`--reward-model` name -> `build_tiny_vlm` keyword arguments."""

GROUND_TRUTHS = ["OPEN", "COFFEE SALE"]
"""The text each benchmark prompt's image is scored against, in `PROMPTS` order (as `examples/ocr` rows)."""


def build_reward_model(name: str, folder: pathlib.Path) -> pathlib.Path:
    """Write the random reward model `name` (`REWARD_MODELS`) into `folder`; return it."""
    from verl_core.testing.tiny_llm import build_tiny_vlm

    return build_tiny_vlm(folder, **REWARD_MODELS[name])


def ocr_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The prompt rows routed to the `ocr` reward: `data_source` `flow_grpo/ocr` and a `ground_truth` each."""
    return [
        dict(row, data_source="flow_grpo/ocr", ground_truth=GROUND_TRUTHS[i % len(GROUND_TRUTHS)])
        for i, row in enumerate(rows)
    ]


def write_ocr_prompts(path: pathlib.Path) -> pathlib.Path:
    """Rewrite the prompt jsonl at `path` (`bench_trainer_run.write_prompts`) with `ocr_rows`."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(r) + "\n" for r in ocr_rows(rows)))
    return path


def reward_model_overrides(folder: pathlib.Path, device: str, dtype: str) -> list[str]:
    """The `diffusion_trainer` overrides that score with the OCR reward on the reward model at `folder`: colocated
    on the HF backend, sleeping between reward phases, greedy answers of at most 16 tokens."""
    rm = "reward.reward_model"
    return [
        "reward.custom_reward_function.path=pkg://verl_omni.reward.ocr",
        "reward.custom_reward_function.name=compute_score_ocr",
        "+reward.custom_reward_function.reward_kwargs.max_tokens=16",
        f"{rm}.enable=true",
        f"{rm}.model_path={folder}",
        f"{rm}.rollout.name=hf",
        f"{rm}.rollout.dtype={dtype}",
        f"{rm}.rollout.gpu_memory_utilization={0.2 if device == 'cuda' else 0.5}",
        f"{rm}.rollout.max_model_len=512",
        f"{rm}.rollout.prompt_length=384",
        f"{rm}.rollout.response_length=16",
    ]


VARIANT_PARTS: dict[str, list[str]] = {
    # one request per prompt, each prompt's group scored while the other prompts generate
    "stream": ["reward.stream=true", "actor_rollout_ref.rollout.agent.prompts_per_request=1"],
    "rm-vllm": ["reward.reward_model.rollout.name=vllm", "reward.reward_model.rollout.enforce_eager=false"],
    "rm-pool": ["reward.reward_model.enable_resource_pool=true", "reward.reward_model.nnodes=1",
                "reward.reward_model.n_gpus_per_node=1"],  # the reward model on a device of its own
}  # fmt: skip
"""Variant parts for `bench_trainer_run.VARIANTS` (they need `--reward-model`, but `stream` alone also works with
the jpeg reward)."""
