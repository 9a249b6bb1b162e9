"""`VerlOmniWorkerExtension`: the worker-side methods `vLLMOmniHttpServer` calls through `collective_rpc`.

vLLM-Omni mixes the class named by `worker_extension_cls` into its `DiffusionWorker`. Ours subclasses
vLLM-Omni's `CustomPipelineWorkerExtension` (so `re_init_pipeline` still builds our custom pipeline), installs
`VLLMOmniHijack` in the worker process before the LoRA manager is built, and adds weight sync: full weights go
to `model_runner.pipeline.load_weights` (the worker's own `load_weights` is gone from 0.26), LoRA adapters are
registered from in-memory tensors with `add_lora(OmniTensorLoRARequest)`. The class is built on first access
(its base lives in vllm-omni), so this module imports without vllm-omni.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["EXTENSION_QUALNAME", "VerlOmniWorkerExtension", "WorkerMethods"]

EXTENSION_QUALNAME = f"{__name__}.VerlOmniWorkerExtension"
_BUILT: type | None = None

VerlOmniWorkerExtension: type
"""`(WorkerMethods, CustomPipelineWorkerExtension)`; built on first access by the module `__getattr__`."""


def __getattr__(name: str) -> Any:
    global _BUILT
    if name == "VerlOmniWorkerExtension":
        if _BUILT is None:
            from vllm_omni.diffusion.worker.diffusion_worker import CustomPipelineWorkerExtension

            _BUILT = type(name, (WorkerMethods, CustomPipelineWorkerExtension),
                          {"__module__": __name__, "__qualname__": name})  # fmt: skip
        return _BUILT
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class WorkerMethods:
    """Methods mixed into vLLM-Omni's diffusion worker (`self` is the worker: `model_runner`, `device`, `add_lora`)."""

    model_runner: Any
    device: torch.device

    def re_init_pipeline(self, custom_pipeline_args: dict[str, Any]) -> None:
        """Install the tensor-LoRA hijack, then build the custom pipeline and its LoRA manager (upstream)."""
        from verl_omni.rollout.vllm_omni.lora import VLLMOmniHijack

        VLLMOmniHijack.hijack()
        super().re_init_pipeline(custom_pipeline_args)  # type: ignore[misc]

    def _verl_pipeline_load(self, pairs: list[tuple[str, torch.Tensor]]) -> Any:
        """The pipeline's `load_weights` on transformer tensors (names without a component get `transformer.`)."""
        named = [(n if n.startswith("transformer.") else f"transformer.{n}", t) for n, t in pairs]
        return self.model_runner.pipeline.load_weights(named)

    def verl_omni_load_weights(self, payload: bytes) -> dict[str, Any]:
        """Load one bucket of full transformer weights (`pack_tensors` payload), tensor by tensor.

        Returns `{"loaded": count, "errors": [{"name", "message"}, ...]}`: a tensor the pipeline refuses (wrong
        shape) or skips (vLLM-Omni's transformers skip unknown names with a debug log) is reported by name.
        """
        from verl_core.rollout.vllm.worker_weights import load_each, unpack_tensors

        tensors = unpack_tensors(payload)
        errors = load_each(self._verl_pipeline_load, tensors, self.device)
        return {"loaded": len(tensors) - len(errors), "errors": errors}

    def verl_omni_read_weights(self, names: list[str]) -> dict[str, Any]:
        """Served values of transformer tensors, read back through the pipeline's loader (`read_back_reply`).

        Names are those of the checkpoint's `transformer/` folder, with or without `transformer.`.
        """
        from pathlib import Path

        from verl_core.rollout.vllm.worker_weights import read_back_reply

        folder = Path(str(self.model_runner.od_config.model)) / "transformer"
        pipeline = self.model_runner.pipeline
        return read_back_reply(pipeline, self._verl_pipeline_load, folder, names, prefix="transformer.")

    def verl_omni_add_lora(
        self, int_id: int, name: str, tensors: dict[str, torch.Tensor], peft_config: dict
    ) -> dict[str, Any]:
        """Register adapter `int_id` from in-memory tensors (`OmniTensorLoRARequest`).

        Answers `{"ok": True}` or `{"ok": False, "errors": [{"name": "peft_config", "message": ...}]}`, never raises:
        vLLM-Omni's RPC logs a worker's exception and answers an error record, losing the message. Refused: an adapter
        binding zero modules or naming unknown target modules (checked before `add_lora`, which evicts the served
        adapter first when the cache is full: a refused adapter must leave the served one in place), and a worker
        with no LoRA manager (e.g. `lora_backend="distill"`).
        """
        from verl_omni.rollout.vllm_omni.lora import load_tensor_adapter, tensor_lora_request

        request = tensor_lora_request(name, int_id, tensors, peft_config)
        try:
            manager = getattr(self, "lora_manager", None)
            if manager is not None:  # check first: the manager evicts the served adapter before it loads a new one
                load_tensor_adapter(manager.pipeline, request, manager.dtype, set(manager._expected_lora_modules))
            added = self.add_lora(request)  # type: ignore[attr-defined]
            if not added and int_id not in (self.list_loras() or []):  # type: ignore[attr-defined]
                raise RuntimeError(f"worker {getattr(self, 'rank', '?')}: LoRA adapter {int_id} was not added "
                                   "(the worker has no LoRA manager)")  # fmt: skip
        except (ValueError, RuntimeError) as e:
            return {"ok": False, "errors": [{"name": "peft_config", "message": f"{type(e).__name__}: {e}"}]}
        return {"ok": True}

    def verl_omni_remove_lora(self, int_id: int) -> bool:
        """Drop adapter `int_id` (False when it was not registered)."""
        return bool(self.remove_lora(int_id))  # type: ignore[attr-defined]
