"""`VerlWorkerExtension`: mixed into vLLM's worker class (`worker_extension_cls`) to receive weights by RPC."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["VerlWorkerExtension"]


class VerlWorkerExtension:
    """Worker-side methods that `BaseVLLMHttpServer` calls through the engine's `collective_rpc`.

    vLLM builds the worker class as a subclass of this extension and its own worker, so `self` has the
    worker's `model_runner` and `device`.
    """

    model_runner: Any
    device: torch.device

    def verl_load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> int:
        """Load one bucket of `(name, tensor)` pairs with the model's own `load_weights`; return the count.

        Raises:
            KeyError: a tensor name the model does not know (vLLM's `load_weights` raises it).
        """
        runner = self.model_runner
        model = runner.get_model() if hasattr(runner, "get_model") else runner.model  # unwraps CUDA graphs
        model.load_weights(weights=[(name, t.to(self.device, non_blocking=True)) for name, t in weights])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return len(weights)
