"""How the engine cuts and moves a trajectory batch: device transfer, micro-batches, the rows that train each step."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from tensordict import TensorDict

__all__ = ["HOST_KEYS", "SKIP_KEYS", "UPDATE_ONLY_KEYS", "micro_batches", "to_device", "trained_rows"]

# the sampler settings a trajectory stores, read by the adapter's score_step
_SAMPLER_SETTING_KEYS = ("noise_level", "guidance_scale", "sde_type", "cps_logprob")
# the per-batch scalars (height, width, steps, ...) stay on the host (the adapter reads them as Python numbers)
HOST_KEYS = ("height", "width", "num_inference_steps", "prompt_index", *_SAMPLER_SETTING_KEYS)
# never needed on the device by the forward paths
SKIP_KEYS = ("images",)
# read by the update only (a log-prob or reference pass leaves them on the host)
UPDATE_ONLY_KEYS = ("old_log_probs", "old_prev_sample_mean", "advantages", "ref_prev_sample_mean", "ref_log_probs")


def to_device(batch: TensorDict, device: torch.device, *, update: bool = False, use_kl: bool = True) -> TensorDict:
    """`batch` on `device`, less `SKIP_KEYS` (and `UPDATE_ONLY_KEYS` unless `update`; the reference's without KL).

    The `HOST_KEYS` stay on the host.
    """
    host = [k for k in HOST_KEYS if k in batch]
    skip = [*SKIP_KEYS, *([] if update else UPDATE_ONLY_KEYS)]
    if update and not use_kl:
        skip += ["ref_prev_sample_mean", "ref_log_probs"]
    moved = batch.exclude(*host, *skip).to(device, non_blocking=True)
    return moved.update(batch.select(*host)) if host else moved


def micro_batches(batch: TensorDict, size: int | None) -> Iterator[TensorDict]:
    """Consecutive slices of `size` rows (the whole batch when `size` is None)."""
    n = batch.batch_size[0]
    size = n if size is None else size
    for start in range(0, n, size):
        yield batch[start : start + size]


def trained_rows(micro: TensorDict, k: int) -> tuple[list[torch.Tensor | None], int]:
    """Per stored step `j`, the (CPU) indices of the rows of `micro` that train it, and the steps each row trains.

    Without `train_step_mask` every row trains every step (`[None] * k`, `k`); with it (DanceGRPO,
    `algorithm.timestep_fraction` < 1) row `i` trains step `j` where `train_step_mask[i, j]`.

    Raises:
        ValueError: the mask is not `(B, k)`, or its rows train different numbers of steps (or none).
    """
    if "train_step_mask" not in micro.keys():  # noqa: SIM118 - a TensorDict's keys
        return [None] * k, k
    mask = micro["train_step_mask"].to("cpu", torch.bool)
    counts = mask.sum(dim=1)
    if mask.shape[1:] != (k,) or bool((counts != counts[0]).any()) or int(counts[0]) < 1:
        raise ValueError(
            f"train_step_mask: expected ({mask.shape[0]}, {k}) bool with the same number >= 1 of trained steps per "
            f"row, got shape {tuple(mask.shape)} and counts {sorted(set(counts.tolist()))}"
        )
    return [mask[:, j].nonzero().squeeze(1) for j in range(k)], int(counts[0])
