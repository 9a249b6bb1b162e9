"""Process-group setup for the engine: one code path, gloo on the CPU and NCCL on GPUs.

Launch with `torchrun` (or Ray workers that set the same `RANK`/`WORLD_SIZE`/`MASTER_*` variables); a plain
single process without those variables gets a world of one on a free local port.
"""

from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

__all__ = ["all_reduce_metrics", "default_device", "ensure_process_group", "free_port", "make_mesh"]


def free_port() -> int:
    """Return a free TCP port on 127.0.0.1 (for a single-process group or a test launcher)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_device(device: str | torch.device | None = None) -> torch.device:
    """The engine's device: `device` if given, else `cuda:LOCAL_RANK` when CUDA is available, else the CPU."""
    if device is not None:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def ensure_process_group(device: torch.device, *, timeout_s: float = 600.0) -> None:
    """Initialise the default process group if needed: gloo for CPU tensors, plus NCCL for CUDA ones.

    Where CUDA is available the group is `cpu:gloo,cuda:nccl`, so CPU and GPU engines can share one process.

    Raises:
        ValueError: a group already exists with a backend that cannot serve `device`.
    """
    need = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if dist.is_initialized():
        have = str(dist.get_backend())
        if need not in have:
            raise ValueError(
                f"the default process group uses backend {have!r}, but the engine device {device} needs {need!r}; "
                "initialise it with that backend (or 'cpu:gloo,cuda:nccl')"
            )
        return
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    kwargs = {}
    if "RANK" not in os.environ:  # not launched by torchrun / Ray: a world of one, without touching os.environ
        kwargs = {"init_method": f"tcp://127.0.0.1:{free_port()}", "rank": 0, "world_size": 1}
    dist.init_process_group(
        backend=backend,
        timeout=datetime.timedelta(seconds=timeout_s),
        device_id=device if device.type == "cuda" else None,
        **kwargs,
    )


def make_mesh(device: torch.device, fsdp_size: int) -> DeviceMesh:
    """1-D data-parallel mesh over all ranks (`fsdp_size` -1 or equal to the world size).

    Raises:
        ValueError: `fsdp_size` is neither -1 nor the world size (hybrid sharding is not implemented).
    """
    world = dist.get_world_size()
    if fsdp_size not in (-1, world):
        raise ValueError(
            f"actor.fsdp_config.fsdp_size: expected -1 or the world size {world}, got {fsdp_size}; "
            "hybrid sharding (HSDP) is not implemented"
        )
    return init_device_mesh(device.type, (world,), mesh_dim_names=("fsdp",))


def all_reduce_metrics(metrics: dict[str, torch.Tensor], device: torch.device) -> dict[str, float]:
    """Average `*` metrics over ranks; keys ending in `_min` / `_max` take the min / max. One host sync per call."""
    if not metrics:
        return {}
    keys = sorted(metrics)
    vals = torch.stack([metrics[k].detach().float().to(device).reshape(()) for k in keys])
    if dist.is_initialized() and dist.get_world_size() > 1:
        mean_mask = torch.tensor([not (k.endswith("_min") or k.endswith("_max")) for k in keys], device=device)
        summed = vals.clone()
        dist.all_reduce(summed, op=dist.ReduceOp.SUM)
        mx = vals.clone()
        dist.all_reduce(mx, op=dist.ReduceOp.MAX)
        mn = vals.clone()
        dist.all_reduce(mn, op=dist.ReduceOp.MIN)
        is_min = torch.tensor([k.endswith("_min") for k in keys], device=device)
        vals = torch.where(mean_mask, summed / dist.get_world_size(), torch.where(is_min, mn, mx))
    return dict(zip(keys, vals.cpu().tolist()))
