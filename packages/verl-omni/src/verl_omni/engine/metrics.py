"""The metrics of a policy update: running sums (min / max) over loss terms, then the `actor/*` means."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from verl_omni.algos import PolicyLossOutput

__all__ = ["accumulate", "accumulate_loss_output", "update_metrics"]


def accumulate(acc: dict[str, torch.Tensor], name: str, value: torch.Tensor) -> None:
    """Running sum of a metric; running min / max for names ending in `_min` / `_max`."""
    value = value.detach().float()
    if name not in acc:
        acc[name] = value
    elif name.endswith("_min"):
        acc[name] = torch.minimum(acc[name], value)
    elif name.endswith("_max"):
        acc[name] = torch.maximum(acc[name], value)
    else:
        acc[name] = acc[name] + value


def accumulate_loss_output(acc: dict[str, torch.Tensor], out: PolicyLossOutput) -> None:
    """One loss term's metrics into `acc`: `pg_loss`, `kl_loss` (when the loss has a KL term) and its own metrics."""
    accumulate(acc, "pg_loss", out.pg_loss)
    if out.kl is not None:
        accumulate(acc, "kl_loss", out.kl)
    for name, value in out.metrics.items():
        accumulate(acc, name, value)


def update_metrics(
    acc: dict[str, torch.Tensor], n_terms: int, grad_norms: list[torch.Tensor], lr: float
) -> dict[str, torch.Tensor]:
    """`actor/<name>`: the mean over `n_terms` loss terms (min / max kept), `actor/grad_norm` (mean), `actor/lr`."""
    metrics = {
        f"actor/{name}": total if name.endswith(("_min", "_max")) else total / n_terms for name, total in acc.items()
    }
    metrics["actor/grad_norm"] = torch.stack(grad_norms).mean()
    metrics["actor/lr"] = torch.tensor(lr)
    return metrics
