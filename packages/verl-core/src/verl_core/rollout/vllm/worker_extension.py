"""`VerlWorkerExtension`: mixed into vLLM's worker class (`worker_extension_cls`) to receive weights by RPC."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from verl_core.rollout.vllm.worker_weights import load_each, read_back_reply, unpack_tensors

__all__ = ["VerlWorkerExtension"]


class VerlWorkerExtension:
    """Worker-side methods that `BaseVLLMHttpServer` calls through the engine's `collective_rpc`.

    vLLM builds the worker class as a subclass of this extension and its own worker, so `self` has the
    worker's `model_runner` and `device`. Tensors travel as one bytes payload per call
    (`verl_core.rollout.vllm.worker_weights`): vLLM's RPC decodes tensor arguments into plain lists.
    """

    model_runner: Any
    device: torch.device

    def _verl_model(self) -> torch.nn.Module:
        runner = self.model_runner
        return runner.get_model() if hasattr(runner, "get_model") else runner.model  # unwraps CUDA graphs

    def verl_load_weights(self, payload: bytes) -> dict[str, Any]:
        """Load one bucket (`pack_tensors` payload) with the model's own `load_weights`, tensor by tensor.

        Returns `{"loaded": count, "errors": [{"name", "message"}, ...]}`: a refused tensor (unknown name, wrong
        shape) is reported by name, never raised from inside vLLM's loader.
        """
        model = self._verl_model()
        tensors = unpack_tensors(payload)
        errors = load_each(lambda pairs: model.load_weights(weights=pairs), tensors, self.device)
        return {"loaded": len(tensors) - len(errors), "errors": errors}

    def verl_read_weights(self, names: list[str]) -> dict[str, Any]:
        """The served values of checkpoint-named tensors, read back through the loader (`read_back_reply`)."""
        model = self._verl_model()
        folder = Path(str(self.model_runner.model_config.model))
        return read_back_reply(model, lambda pairs: model.load_weights(weights=pairs), folder, names)
