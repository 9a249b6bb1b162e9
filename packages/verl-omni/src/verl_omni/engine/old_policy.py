"""θ_old of a loss that reads the old policy's velocity (DiffusionNFT): a copy of the trainable weights, same sharding.

The engine builds it when the registered loss needs `old_velocity`; the trainer refreshes it after each step
(`DiffusersFSDPEngine.refresh_old_policy`) and the rollout samples with it (`export_weights`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

__all__ = ["OldPolicy"]


class OldPolicy:
    """θ_old: a detached copy of the module's trainable parameters (LoRA tensors, or every weight), same sharding.

    Args:
        module (`torch.nn.Module`): the (FSDP2-sharded) trained module; the copy is taken now, so θ_old = θ.
    """

    def __init__(self, module: torch.nn.Module) -> None:
        self._params = {name: p for name, p in module.named_parameters() if p.requires_grad}
        self._old = {name: p.detach().clone() for name, p in self._params.items()}
        self.refreshes = 0

    @contextlib.contextmanager
    @torch.no_grad()
    def active(self) -> Iterator[None]:
        """Run the module with θ_old in place of θ; θ is put back on exit (bit for bit)."""
        saved = {name: p.detach().clone() for name, p in self._params.items()}
        for name, p in self._params.items():
            p.copy_(self._old[name])
        try:
            yield
        finally:
            for name, p in self._params.items():
                p.copy_(saved[name])

    @torch.no_grad()
    def refresh(self, decay: float) -> None:
        """`θ_old ← decay·θ_old + (1 − decay)·θ` (decay 0 copies θ)."""
        for name, p in self._params.items():
            if decay == 0.0:
                self._old[name].copy_(p.detach())
            else:
                self._old[name].mul_(decay).add_(p.detach(), alpha=1.0 - decay)
        self.refreshes += 1

    def max_abs_diff(self) -> float:
        """The largest |θ − θ_old| over every trained tensor (0.0 right after a copy)."""
        diffs = [(p.detach() - self._old[n]).abs().max() for n, p in self._params.items()]
        value = torch.stack([d.full_tensor() if hasattr(d, "full_tensor") else d for d in diffs]).max()
        return float(value)

    def save(self, path: Path) -> None:
        """DCP-save θ_old and the refresh count under `path` (a collective)."""
        dcp.save({**self._old, "refreshes": torch.tensor(self.refreshes)}, checkpoint_id=str(path))

    def load(self, path: Path) -> None:
        """Load what `save` wrote (a collective).

        Raises:
            FileNotFoundError: `path` does not exist (a checkpoint of a run whose loss had no old policy).
        """
        if not path.is_dir():
            raise FileNotFoundError(
                f"{path}: the checkpoint holds no old policy (saved under a loss without one); resume it with its "
                "own actor.diffusion_loss.loss_mode"
            )
        state = {**self._old, "refreshes": torch.tensor(0)}
        dcp.load(state, checkpoint_id=str(path))
        self.refreshes = int(state["refreshes"])
