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

    def verl_omni_load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> int:
        """Load one bucket of full transformer weights; names without a component get `transformer.`.

        Raises:
            KeyError / ValueError: from the pipeline's `load_weights` for an unknown name or a wrong shape.
        """
        pipeline = self.model_runner.pipeline
        named = [(n if n.startswith("transformer.") else f"transformer.{n}", t.to(self.device)) for n, t in weights]
        pipeline.load_weights(named)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return len(named)

    def verl_omni_add_lora(self, int_id: int, name: str, tensors: dict[str, torch.Tensor], peft_config: dict) -> bool:
        """Register adapter `int_id` from in-memory tensors (`OmniTensorLoRARequest`).

        Raises:
            RuntimeError: the worker has no LoRA manager (e.g. `lora_backend="distill"`), so the adapter was not added.
            ValueError: the adapter would bind zero modules or has unknown target modules (from the hijack).
        """
        from verl_omni.rollout.vllm_omni.lora import tensor_lora_request

        added = self.add_lora(tensor_lora_request(name, int_id, tensors, peft_config))  # type: ignore[attr-defined]
        if not added and int_id not in (self.list_loras() or []):  # type: ignore[attr-defined]
            raise RuntimeError(f"worker {getattr(self, 'rank', '?')}: LoRA adapter {int_id} was not added (no manager)")
        return True

    def verl_omni_remove_lora(self, int_id: int) -> bool:
        """Drop adapter `int_id` (False when it was not registered)."""
        return bool(self.remove_lora(int_id))  # type: ignore[attr-defined]
