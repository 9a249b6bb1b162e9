"""Worker of the multi-process engine tests: one FlowGRPO update on this rank's share of a saved batch.

Run under `torchrun` (or `python -m torch.distributed.run`); rank r takes rows [r·B/W, (r+1)·B/W) of the batch.
Rank 0 writes the metrics, the gathered old log-probs and the initial and updated full weights to `--out`.
The tests also call `run_update` in-process for the one-rank reference.

    python -m torch.distributed.run --standalone --nproc_per_node 2 dist_worker.py \\
        --pipeline PATH --batch batch.pt --out result.pt [--device cuda] [--lora-rank 4] [--lora-kl-loop]

`--lora-kl-loop` runs the default recipe's precision instead (LoRA, KL, bf16 compute): reference log-probs ->
update -> reference log-probs -> update, the reference pass being the engine's first forward (`run_lora_kl_loop`).
"""

from __future__ import annotations

import argparse
import os
import sys

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


def run_lora_kl_loop(pipeline: str, batch_path: str, *, device: str) -> dict:
    """LoRA + KL in bf16: (reference log-probs, update) twice on this rank's rows; return what rank 0 reports."""
    saved = torch.load(batch_path, weights_only=False)
    batch = TensorDict(saved, batch_size=[saved["advantages"].shape[0]])
    actor = DiffusionActorConfig(
        rollout_n=2,
        ppo_mini_batch_size=2,
        use_kl_loss=True,
        kl_loss_coef=0.04,
        optim={"lr": 5e-2, "weight_decay": 0.0},
        fsdp_config={"dtype": "bfloat16"},
    )
    model = DiffusionModelConfig(path=pipeline, enable_gradient_checkpointing=False, lora_rank=4, lora_alpha=8)
    engine = DiffusersFSDPEngine.from_pretrained(model, actor, device=device)
    rank, world = engine.rank, engine.world_size
    n = batch.batch_size[0] // world
    local = batch[rank * n : (rank + 1) * n]
    local["old_log_probs"] = local["log_probs"]  # the rollout's: the reference pass is the first forward
    refs, metrics = [], []
    for _ in range(2):
        ref = engine.compute_ref_log_prob(local)
        gathered = [torch.empty_like(ref["ref_log_probs"]) for _ in range(world)]
        dist.all_gather(gathered, ref["ref_log_probs"])
        refs.append(torch.cat(gathered).cpu())
        step = local.clone()
        step["ref_prev_sample_mean"] = ref["ref_prev_sample_mean"].cpu()
        metrics.append(engine.update_policy(step))
    return {"ref_log_probs": refs, "metrics": metrics, "weights": engine.export_weights()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--batch", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lora-rank", type=int, default=0)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--lora-kl-loop", action="store_true", help="run run_lora_kl_loop instead of run_update")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.lora_kl_loop:
        result = run_lora_kl_loop(args.pipeline, args.batch, device=args.device)
    else:
        result = run_update(args.pipeline, args.batch, device=args.device, lora_rank=args.lora_rank, dtype=args.dtype)
    if dist.get_rank() == 0:
        torch.save(result, args.out)
    dist.barrier()
    dist.destroy_process_group()
    # torch 2.13's gloo can abort in its C++ static teardown after all work is done (about 1 run in 50 on
    # the 2-core CI VM: "terminate called without an active exception", no Python frame); the results are
    # written and the group destroyed, so leave without that teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
