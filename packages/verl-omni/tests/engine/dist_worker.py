"""Worker of the multi-process engine tests: one FlowGRPO update on this rank's share of a saved batch.

Run under `torchrun` (or `python -m torch.distributed.run`); rank r takes rows [r·B/W, (r+1)·B/W) of the batch.
Rank 0 writes the metrics, the gathered old log-probs and the initial and updated full weights to `--out`.
The tests also call `run_update` in-process for the one-rank reference.

    python -m torch.distributed.run --standalone --nproc_per_node 2 dist_worker.py \\
        --pipeline PATH --batch batch.pt --out result.pt [--device cuda] [--lora-rank 4]
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
from tensordict import TensorDict

from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
from verl_omni.engine import DiffusersFSDPEngine


def run_update(pipeline: str, batch_path: str, *, device: str, lora_rank: int, dtype: str) -> dict:
    """Build an engine, recompute old log-probs on this rank's rows, update once; return what rank 0 reports."""
    saved = torch.load(batch_path, weights_only=False)
    batch = TensorDict(saved, batch_size=[saved["advantages"].shape[0]])
    actor = DiffusionActorConfig(
        rollout_n=2,
        ppo_mini_batch_size=2,  # 2 prompts x 2 images = the whole global batch of 4: one optimizer step
        ppo_micro_batch_size_per_gpu=1,
        optim={"lr": 1e-3, "eps": 1e-6, "weight_decay": 0.0},
        fsdp_config={"dtype": dtype},
    )
    model = DiffusionModelConfig(path=pipeline, enable_gradient_checkpointing=False, lora_rank=lora_rank, lora_alpha=8)
    engine = DiffusersFSDPEngine.from_pretrained(model, actor, device=device)
    initial = engine.export_weights()
    rank, world = engine.rank, engine.world_size
    n = batch.batch_size[0] // world
    local = batch[rank * n : (rank + 1) * n]
    old = engine.compute_log_prob(local)["old_log_probs"]
    local["old_log_probs"] = old.cpu()
    metrics = engine.update_policy(local)
    gathered = [torch.empty_like(old) for _ in range(world)]
    dist.all_gather(gathered, old)
    return {
        "metrics": metrics,
        "old_log_probs": torch.cat(gathered).cpu(),
        "weights": engine.export_weights(),
        "initial_weights": initial,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--batch", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lora-rank", type=int, default=0)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    torch.set_num_threads(1)
    result = run_update(args.pipeline, args.batch, device=args.device, lora_rank=args.lora_rank, dtype=args.dtype)
    if dist.get_rank() == 0:
        torch.save(result, args.out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
