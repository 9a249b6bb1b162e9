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

    def verl_omni_read_weights(self, names: list[str]) -> bytes:
        """Served values of transformer tensors named as the checkpoint's `transformer/` folder names them.

        Raises:
            KeyError: a name the checkpoint's transformer or the pipeline does not have.
            ValueError: the transformer is sharded or transforms the tensor on load (see `read_back`).
        """
        from pathlib import Path

        from verl_core.rollout.vllm.worker_weights import checkpoint_specs, pack_tensors, read_back

        folder = Path(str(self.model_runner.od_config.model)) / "transformer"
        shapes = checkpoint_specs(folder)
        bare = {n: n.removeprefix("transformer.") for n in names}
        unknown = [n for n, b in bare.items() if b not in shapes]
        if unknown:
            raise KeyError(f"{unknown[0]!r} is not a tensor of the served transformer {folder} ({len(shapes)} are)")
        pipeline = self.model_runner.pipeline
        served = read_back(pipeline, self._verl_pipeline_load, {n: shapes[b] for n, b in bare.items()})
        return pack_tensors(served.items())

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
