"""LoRA merges on CUDA in one Triton kernel per layer shape: `out = W0 + scale * (B @ A)`, float32 sums, one rounding.

peft's merge (and the torch path of `lora.merge`) runs a float32 matmul that writes the `out x in` delta to memory,
then an add that reads it back: 12 bytes of traffic per bf16 weight besides the GEMM, and a few kernel launches per
layer. Here each tile of the delta stays in registers (`tl.dot` in IEEE float32: the same products and float32
sums as the torch path, in the kernel's order) and is added to the pristine weight on its way out: 4 bytes per
bf16 weight. Layers of one shape, dtype and layout go in ONE launch (a grid axis over the layers, their addresses
in a small table), so a transformer of a hundred LoRA layers costs three or four launches, not a hundred.
Triton ships with CUDA builds of torch; without it, or for tensors it does not cover, `supports` is False and the
caller takes the torch path.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["MergeJob", "merge_many", "supports"]

MergeJob = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float]  # out, w0, lora_b, lora_a, scale
_OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_BLOCK_M, _BLOCK_N = 64, 128  # fastest on an H200 for workload B's layers (3072 x 3072, 3072 x 12288, r64)


@functools.cache
def _kernel() -> Any:
    """The Triton kernel (compiled on its first launch per dtype), or None when Triton is not importable."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def merge_kernel(table, scales, L, M, N, K, s_w0, s_b, s_a, s_out,
                     DTYPE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):  # fmt: skip
        layer = tl.program_id(2)  # table rows: w0, lora_b, lora_a, out addresses, one column per layer
        # addresses read from memory carry no alignment: say what `supports` checked (16 bytes), or no vector loads
        w0 = tl.multiple_of(tl.load(table + layer).to(tl.pointer_type(DTYPE)), 16)
        b = tl.multiple_of(tl.load(table + L + layer).to(tl.pointer_type(tl.float32)), 16)
        a = tl.multiple_of(tl.load(table + 2 * L + layer).to(tl.pointer_type(tl.float32)), 16)
        out = tl.multiple_of(tl.load(table + 3 * L + layer).to(tl.pointer_type(DTYPE)), 16)
        rows = tl.program_id(0) * BM + tl.arange(0, BM)
        cols = tl.max_contiguous(tl.multiple_of(tl.program_id(1) * BN + tl.arange(0, BN), BN), BN)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            ks = k0 + tl.arange(0, BK)
            b_tile = tl.load(b + rows[:, None] * s_b + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K),
                             other=0.0)  # fmt: skip
            a_tile = tl.load(a + ks[:, None] * s_a + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N),
                             other=0.0)  # fmt: skip
            acc += tl.dot(b_tile, a_tile, input_precision="ieee")
        inside = (rows[:, None] < M) & (cols[None, :] < N)
        base = tl.load(w0 + rows[:, None] * s_w0 + cols[None, :], mask=inside, other=0.0).to(tl.float32)
        merged = base + acc * tl.load(scales + layer)
        tl.store(out + rows[:, None] * s_out + cols[None, :], merged.to(DTYPE), mask=inside)

    return merge_kernel


def supports(out: torch.Tensor, w0: torch.Tensor, lora_b: torch.Tensor, lora_a: torch.Tensor) -> bool:
    """True when `merge_many` can take this job: Triton importable, CUDA tensors on one device, 2-D, rows contiguous.

    `out` and `w0` share shape and a floating dtype; `lora_b` (rows x r) and `lora_a` (r x columns) are float32.
    """
    tensors = (out, w0, lora_b, lora_a)
    if not all(t.is_cuda and t.dim() == 2 and t.stride(1) == 1 for t in tensors):
        return False
    if len({t.device for t in tensors}) != 1 or out.dtype not in _OUT_DTYPES or w0.dtype != out.dtype:
        return False
    if lora_b.dtype != torch.float32 or lora_a.dtype != torch.float32:
        return False
    if any(t.data_ptr() % 16 for t in tensors):  # the kernel assumes 16-byte aligned starts (allocations are)
        return False
    (m, n), (mb, k), (ka, na) = out.shape, lora_b.shape, lora_a.shape
    return w0.shape == out.shape and (mb, na) == (m, n) and k == ka and k > 0 and _kernel() is not None


def merge_many(jobs: Sequence[MergeJob]) -> None:
    """`out = w0 + scale * (lora_b @ lora_a)` for every job (each passed `supports`), one launch per layout.

    Launched on each device's current stream; `out` must not overlap another job's tensors.
    """
    groups: dict[tuple[Any, ...], list[MergeJob]] = {}
    for job in jobs:
        out, w0, lora_b, lora_a, _ = job
        key = (out.device, out.dtype, *out.shape, lora_b.shape[1], w0.stride(0), lora_b.stride(0),
               lora_a.stride(0), out.stride(0))  # fmt: skip
        groups.setdefault(key, []).append(job)
    for members in groups.values():
        _launch(members)


def _launch(jobs: list[MergeJob]) -> None:
    import triton
    import triton.language as tl

    out, w0, lora_b, lora_a, _ = jobs[0]
    (m, n), k = out.shape, lora_b.shape[1]
    table = [j[1].data_ptr() for j in jobs] + [j[2].data_ptr() for j in jobs]
    table += [j[3].data_ptr() for j in jobs] + [j[0].data_ptr() for j in jobs]
    device = out.device  # pinned sources: the copies queue behind the stream's work instead of waiting for it
    addresses = torch.tensor(table, dtype=torch.int64).pin_memory().to(device, non_blocking=True)
    scales = torch.tensor([float(j[4]) for j in jobs], dtype=torch.float32).pin_memory().to(device, non_blocking=True)
    dtype = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}[out.dtype]
    block_k = min(64, max(16, triton.next_power_of_2(k)))
    grid = (triton.cdiv(m, _BLOCK_M), triton.cdiv(n, _BLOCK_N), len(jobs))
    with torch.cuda.device(device):
        _kernel()[grid](
            addresses, scales, len(jobs), m, n, k,
            w0.stride(0), lora_b.stride(0), lora_a.stride(0), out.stride(0),
            DTYPE=dtype, BM=_BLOCK_M, BN=_BLOCK_N, BK=block_k,
        )  # fmt: skip
