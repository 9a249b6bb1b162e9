"""Worker of the multi-process export test: every rank exports and checks against a per-tensor reference.

Run under `torch.distributed.run` (gloo, CPU); each rank writes `{"checked": [...], "errors": [...]}` to
`--out` with `.rank<r>` appended.

    python -m torch.distributed.run --standalone --nproc_per_node 2 export_worker.py --pipeline PATH --out result.pt
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist

from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
from verl_omni.engine import DiffusersFSDPEngine


def reference(module: torch.nn.Module, *, lora_only: bool, dtype: torch.dtype | None) -> dict[str, torch.Tensor]:
    """The straightforward export from `module.state_dict()`: full tensor (a collective), cast, CPU copy."""
    out = {}
    for name, value in module.state_dict().items():
        if ("lora_" in name) != lora_only:
            continue
        key = name.replace(".default.", ".") if lora_only else name.replace(".base_layer.", ".")
        full = value.full_tensor() if hasattr(value, "full_tensor") else value
        out[key] = full.detach().to(device="cpu", dtype=dtype or full.dtype, copy=True)
    return out


def check(pipeline: str) -> dict[str, list[str]]:
    checked, errors = [], []
    actor = DiffusionActorConfig(
        rollout_n=2, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1, fsdp_config={"dtype": "float32"}
    )
    for lora_rank in (0, 4):
        model = DiffusionModelConfig(
            path=pipeline, enable_gradient_checkpointing=False, lora_rank=lora_rank, lora_alpha=8
        )
        engine = DiffusersFSDPEngine.from_pretrained(model, actor, device="cpu")
        sharded = [n for n, p in engine.module.named_parameters() if p.to_local().shape != p.shape]
        if not sharded:
            errors.append(f"lora_rank={lora_rank}: no parameter is sharded across the ranks")
        for dtype in (None, torch.bfloat16):
            got = engine.export_weights(dtype=dtype)
            want = reference(engine.module, lora_only=lora_rank > 0, dtype=dtype)
            if list(got) != list(want):
                errors.append(f"lora_rank={lora_rank} dtype={dtype}: names differ")
            for name, value in want.items():
                if got[name].dtype != value.dtype or not torch.equal(got[name], value):
                    errors.append(f"lora_rank={lora_rank} dtype={dtype}: {name} differs")
            checked.append(f"lora_rank={lora_rank} dtype={dtype}: {len(want)} tensors")
    # uneven row shards (5 rows, 1 row, 3 x 7 on two ranks: a short and an empty shard) and mixed dtypes
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    module = torch.nn.Module()
    module.a = torch.nn.Parameter(torch.randn(5, 3))
    module.b = torch.nn.Parameter(torch.randn(1))
    module.c = torch.nn.Parameter(torch.randn(3, 7, dtype=torch.float64))
    fully_shard(module, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
    from verl_omni.engine.lora import export_weights

    for dtype in (None, torch.bfloat16):
        got = export_weights(module, lora_only=False, dtype=dtype)
        want = reference(module, lora_only=False, dtype=dtype)
        bad = [n for n in want if got[n].dtype != want[n].dtype or not torch.equal(got[n], want[n])]
        if list(got) != list(want) or bad:
            errors.append(f"uneven shards dtype={dtype}: {bad or 'names differ'}")
        checked.append(f"uneven shards dtype={dtype}: {len(want)} tensors")
    return {"checked": checked, "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    result = check(args.pipeline)
    torch.save(result, f"{args.out}.rank{dist.get_rank()}")
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
