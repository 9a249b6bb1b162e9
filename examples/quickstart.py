"""Quickstart: a few FlowGRPO iterations on a tiny random Qwen-Image pipeline, in one process, on the CPU.

    python examples/quickstart.py [--iterations 6] [--out outputs/quickstart] [--device cpu]

Everything is built locally (no download). Each iteration runs the pieces verl-omni has today:

1. rollout: `DiffusersRolloutEngine` samples `n` images per prompt with the SDE scheduler and records
   the per-step log-probs (the trajectory is a `TensorDict`);
2. reward: `jpeg_compressibility` scores each image;
3. advantages: group-normalised GRPO advantages;
4. old log-probs: `DiffusersFSDPEngine.compute_log_prob` recomputes them with the training weights
   (they match the rollout's to ~1e-6; the gap is printed);
5. update: `DiffusersFSDPEngine.update_policy` (FSDP2, LoRA through peft, clipped FlowGRPO loss);
6. weight sync: the LoRA tensors go back into the rollout engine.

This is not the verl-omni trainer: the Ray trainer with its Hydra config (`verl-omni-train`) is not
implemented yet. The script writes a reward curve and a grid of the last samples as PNGs.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import torch
from tqdm import tqdm

from verl_omni.algos import compute_flow_grpo_advantages
from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
from verl_omni.engine import DiffusersFSDPEngine
from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.reward import jpeg_compressibility
from verl_omni.rollout import DiffusersRolloutEngine
from verl_omni.testing import build_tiny_pipeline

PROMPTS = ["a red cube on a table", "a quiet lake at dawn"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=6, help="FlowGRPO iterations (default 6)")
    parser.add_argument("--n", type=int, default=4, help="images per prompt, the GRPO group size (default 4)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("outputs/quickstart"))
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    return parser.parse_args()


def save_pngs(out: pathlib.Path, rewards: list[float], images: torch.Tensor) -> list[pathlib.Path]:
    """Write the mean-reward curve and a grid of the last iteration's images; return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    curve = out / "reward_curve.png"
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(range(1, len(rewards) + 1), rewards, marker="o")
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean jpeg_compressibility")
    ax.set_title("FlowGRPO quickstart, tiny random Qwen-Image", fontsize=10)
    ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    fig.savefig(curve)
    plt.close(fig)

    grid_path = out / "samples.png"
    b, _, h, w = images.shape
    cols = min(b, 4)
    rows = (b + cols - 1) // cols
    grid = Image.new("RGB", (cols * w, rows * h))
    for i, img in enumerate(images):
        grid.paste(Image.fromarray(img.permute(1, 2, 0).numpy()), ((i % cols) * w, (i // cols) * h))
    grid.resize((cols * w * 2, rows * h * 2), Image.NEAREST).save(grid_path)
    return [curve, grid_path]


def main() -> None:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    print("verl-omni quickstart: FlowGRPO pieces on a tiny random Qwen-Image pipeline (no download)")
    model_dir = build_tiny_pipeline("qwen_image", args.out / "tiny-qwen-image", preset="tiny", seed=0)
    print(f"built a random-weight pipeline in {model_dir}")

    sampling = DiffusionSamplingConfig(
        n=args.n, num_inference_steps=4, height=64, width=64, max_sequence_length=32, noise_level=0.7, seed=0
    )
    rollout = DiffusersRolloutEngine(model_dir, device=args.device, sampling=sampling)
    model_cfg = DiffusionModelConfig(
        path=str(model_dir), lora_rank=8, lora_alpha=16, enable_gradient_checkpointing=False
    )
    batch_size = len(PROMPTS) * args.n
    actor_cfg = DiffusionActorConfig(
        rollout_n=args.n,
        ppo_mini_batch_size=len(PROMPTS),
        ppo_micro_batch_size_per_gpu=batch_size,
        optim={"lr": 3e-3, "weight_decay": 0.0},
        diffusion_loss={"clip_ratio": 1e-2},
        fsdp_config={"dtype": "float32"},
    )
    engine = DiffusersFSDPEngine.from_pretrained(model_cfg, actor_cfg, device=args.device)
    lora_config = {
        "r": model_cfg.lora_rank,
        "lora_alpha": model_cfg.lora_alpha,
        "target_modules": model_cfg.target_modules,
    }
    print(f"engine: FSDP2 over {engine.num_sharded_blocks} blocks, {engine.num_lora_modules} LoRA modules")

    mean_rewards: list[float] = []
    progress = tqdm(range(args.iterations), desc="FlowGRPO", unit="iter")
    for it in progress:
        t0 = time.perf_counter()
        # 1. rollout with log-probs
        traj = rollout.generate(PROMPTS, sampling.evolve(seed=1000 * it))
        # 2. reward
        rewards = jpeg_compressibility(traj["images"]).float()
        # 3. group advantages
        traj["advantages"] = compute_flow_grpo_advantages(rewards, traj["prompt_index"])
        # 4. old log-probs from the training weights
        traj["old_log_probs"] = engine.compute_log_prob(traj)["old_log_probs"].to(traj.device)
        # 5. policy update
        metrics = engine.update_policy(traj)
        # 6. weight sync: LoRA tensors into the rollout engine
        rollout.update_weights(engine.export_weights(), lora_config=lora_config)
        mean_rewards.append(rewards.mean().item())
        progress.set_postfix(
            reward=f"{mean_rewards[-1]:.4f}",
            logprob_gap=f"{metrics.get('actor/rollout_logprob_diff_max', float('nan')):.1e}",
            clipfrac=f"{metrics['actor/pg_clipfrac']:.2f}",
            s=f"{time.perf_counter() - t0:.1f}",
        )

    for path in save_pngs(args.out, mean_rewards, traj["images"]):
        print(f"wrote {path}")
    print(
        "done. Next: the Ray FlowGRPO trainer (`verl-omni-train`, Hydra config) is not implemented yet; "
        "this loop shows the pieces it will drive."
    )


if __name__ == "__main__":
    main()
