"""`DiffusersRolloutEngine`: the embedded, in-process rollout engine (a log-prob pipeline plus weight sync)."""

from __future__ import annotations

import contextlib
import json
import logging
import pathlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from tensordict import TensorDict

from verl_omni.models.base import get_class
from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.pipelines.load import load_pipeline
from verl_omni.rollout.diffusers.host_offload import HostOffload
from verl_omni.rollout.diffusers.staging import staged_to_device
from verl_omni.rollout.lora import merge as lora_merge

__all__ = ["DiffusersRolloutEngine", "canonical_weight_name", "compile_transformer_blocks"]

logger = logging.getLogger(__name__)

_PREFIXES = ("base_model.model.", "transformer.", "module.", "_fsdp_wrapped_module.")


def canonical_weight_name(name: str) -> str:
    """`name` without the wrapper prefixes a trainer may send (`base_model.model.`, `transformer.`, ...)."""
    return _strip(name)


def _strip(name: str) -> str:
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if name.startswith(p):
                name, changed = name[len(p) :], True
    return name


def compile_transformer_blocks(transformer: torch.nn.Module) -> int:
    """`torch.compile` each repeated block of `transformer` in place; return how many were compiled.

    The blocks are the modules whose class the model lists in diffusers' `_repeated_blocks` (what
    `ModelMixin.compile_repeated_blocks` compiles), or else the children of its `transformer_blocks` list (SD3 lists
    none). Each block's forward is wrapped lazily (`nn.Module.compile`): nothing is compiled before a forward, and
    adapters added later (a LoRA) only trigger a recompile of the block.

    Raises:
        ValueError: no block found (names the transformer class).
    """
    names = set(getattr(transformer, "_repeated_blocks", None) or ())
    if names:
        blocks = [m for m in transformer.modules() if type(m).__name__ in names]
    else:
        container = getattr(transformer, "transformer_blocks", None)
        blocks = list(container.children()) if isinstance(container, torch.nn.ModuleList) else []
    if not blocks:
        raise ValueError(
            f"rollout.engine_kwargs.diffusers.compile_blocks: {type(transformer).__name__} has no repeated blocks "
            "(no `_repeated_blocks` and no `transformer_blocks` list); set it to false"
        )
    for block in blocks:
        block.compile()
    return len(blocks)


class DiffusersRolloutEngine:
    """Loads a diffusers pipeline folder in-process and generates FlowGRPO trajectories.

    Args:
        model_path (`str` or `pathlib.Path`): a pipeline folder (`model_index.json` + components).
        device (`str` or `torch.device`, defaults to `"cpu"`): where the pipeline runs.
        dtype (`torch.dtype`, defaults to float32): weights dtype (bf16 on GPUs); trajectories stay float32.
        sampling (`DiffusionSamplingConfig`, *optional*): default sampling parameters of `generate`.
        external_lib (`str`, *optional*): module that registers extra model adapters (imported once).
        merge_lora (`bool`, defaults to `True`): serve a LoRA adapter folded into the base weights of the layers
            it wraps (`W = W0 + scale * B @ A`, recomputed from a pristine copy of `W0` after every weight update),
            so the sampling forward is the plain model; the adapter weights are then held in float32. False
            runs peft's LoRA layers in the forward (slower; the pristine copies cost no memory).
        compile_blocks (`bool`, defaults to `False`): `torch.compile` each repeated block of the transformer
            (regional compilation, see `compile_transformer_blocks`); the first requests of each shape pay the
            compile time.

    Raises:
        KeyError: the folder's `_class_name` has no registered adapter (lists the registered names).
        ValueError: `compile_blocks` and the transformer has no repeated blocks to compile.
    """

    def __init__(
        self,
        model_path: str | pathlib.Path,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        sampling: DiffusionSamplingConfig | None = None,
        external_lib: str | None = None,
        merge_lora: bool = True,
        compile_blocks: bool = False,
    ) -> None:
        self.model_path = pathlib.Path(model_path)
        class_name = json.loads((self.model_path / "model_index.json").read_text())["_class_name"]
        adapter_cls = get_class(class_name, external_lib)
        from verl_omni.pipelines import LOGPROB_PIPELINES  # diffusers' pipelines load with the first engine

        pipeline_cls = LOGPROB_PIPELINES.get(adapter_cls.name)
        self.device = torch.device(device)
        self.pipeline = load_pipeline(pipeline_cls, self.model_path, dtype).to(self.device)
        self.pipeline.set_progress_bar_config(disable=True)
        self.compiled_blocks = compile_transformer_blocks(self.pipeline.transformer) if compile_blocks else 0
        self.sampling = sampling or DiffusionSamplingConfig()
        self.weight_version = 0
        self.sources_read: Any = None  # CUDA event after the last update's copies (its merge may still run)
        self.merge_lora = merge_lora
        self._merge_pending = False  # merged LoRA weights were dropped by sleep: recompute before they are used
        self._forget_lora_layout()
        # sleep's pinned host copies, reused across sleeps (None: `.to()`, on a CPU device or after pinning failed)
        self._host: HostOffload | None = HostOffload(pin=True) if self.device.type == "cuda" else None

    @property
    def transformer(self) -> torch.nn.Module:
        """The denoiser the pipeline samples with (weights are updated in place)."""
        return self.pipeline.transformer

    @torch.no_grad()
    def generate(
        self,
        prompts: list[str],
        sampling: DiffusionSamplingConfig | None = None,
        generator: torch.Generator | list[torch.Generator] | None = None,
        *,
        should_abort: Callable[[], bool] | None = None,
    ) -> TensorDict:
        """Generate `n` images per prompt; return the trajectory TensorDict (images under `"images"`).

        `should_abort` is checked before every denoising step; when it returns True, `GenerationAborted` is raised.

        Raises:
            RuntimeError: compiling the transformer's blocks failed (names the keys that turn it off).
        """
        if self._merge_pending:
            self.remerge_lora()
        with self._compile_errors_named():
            out = self.pipeline.generate_with_logprob(
                prompts, sampling or self.sampling, generator, should_abort=should_abort
            )
        return out.trajectory

    @contextlib.contextmanager
    def _compile_errors_named(self) -> Iterator[None]:
        """Turn a torch.compile failure of the compiled blocks into an error naming the keys that turn it off."""
        if not self.compiled_blocks:
            yield
            return
        from torch._dynamo.exc import TorchDynamoException  # loaded already: the blocks are compiled

        try:
            yield
        except TorchDynamoException as e:
            raise RuntimeError(
                f"rollout: torch.compile of the transformer blocks failed ({type(e).__name__}: {str(e)[:500]}); "
                "set actor_rollout_ref.rollout.enforce_eager=true (or "
                "rollout.engine_kwargs.diffusers.compile_blocks=false) to sample eagerly"
            ) from e

    # ---- weight sync ------------------------------------------------------------------------------

    @torch.no_grad()
    def update_weights(
        self,
        weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
        *,
        lora_config: Any = None,
        adapter_name: str = "default",
    ) -> int:
        """Load full transformer weights, or LoRA weights when `lora_config` is given, from in-memory tensors.

        Args:
            weights: `{name: tensor}` or `(name, tensor)` pairs; names as in the transformer's state dict or
                peft's `get_peft_model_state_dict` (prefixes `base_model.model.` / `transformer.` are stripped).
            lora_config (`peft.LoraConfig` or `dict`, *optional*): when given, the tensors are LoRA weights; the
                adapter is added on first use and its weights replaced on later calls.
            adapter_name (`str`, defaults to `"default"`): the peft adapter name.

        Returns:
            The number of tensors loaded.

        Raises:
            KeyError: a tensor name matches no parameter (names the first unknown ones and close known ones).
            ValueError: a shape mismatch, or a LoRA config that wraps no module.

        Every name and shape is checked before a tensor is written: a rejected update changes no weight. With
        `merge_lora`, a full update writes the pristine base weights of LoRA-wrapped layers and those layers
        are merged again; a LoRA update merges every wrapped layer again.
        """
        items = list(weights.items()) if isinstance(weights, Mapping) else list(weights)
        if lora_config is not None:
            self._ensure_lora(lora_config, adapter_name)
        params = self._param_index(adapter_name, lora=lora_config is not None)
        unknown = [n for n, _ in items if _strip(n) not in params]
        if unknown:
            sample = sorted(params)[:5]
            raise KeyError(f"weights: {len(unknown)} names match no parameter, e.g. {unknown[:3]}; known e.g. {sample}")
        for name, tensor in items:
            param = params[_strip(name)]
            if tuple(param.shape) != tuple(tensor.shape):
                raise ValueError(f"weights[{name!r}]: shape {tuple(tensor.shape)} != parameter {tuple(param.shape)}")
        full = lora_config is None  # a LoRA tensor never belongs to a merged layer's base weights
        owners = {id(t): layer for t, layer in lora_merge.pristine_tensors(self.transformer).values()} if full else {}
        targets = [params[_strip(name)] for name, _ in items]
        self._copy_into(targets, [tensor for _, tensor in items])
        self.mark_sources_read()
        touched = {id(owners[id(p)]): owners[id(p)] for p in targets if id(p) in owners}
        if lora_config is not None or self._merge_pending:
            self.remerge_lora()
        elif touched and self.merge_lora:
            lora_merge.merge(self.transformer, list(touched.values()))
        self.weight_version += 1
        return len(items)

    def _copy_into(self, targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
        """`targets[i].copy_(sources[i])` (casting); host sources for CUDA targets go in a few staged transfers."""
        staged = [i for i, t in enumerate(targets) if t.device.type == "cuda" and sources[i].device.type == "cpu"]
        for i in sorted(set(range(len(targets))) - set(staged)):
            targets[i].copy_(sources[i])
        if staged:
            for chunk in staged_to_device([sources[i] for i in staged], targets[staged[0]].device):
                for j, tensor in chunk:
                    targets[staged[j]].copy_(tensor)
            torch.cuda.current_stream(targets[staged[0]].device).synchronize()  # the sources may be reused on return

    def mark_sources_read(self) -> None:
        """Set `sources_read`: a CUDA event recorded now on the current stream (None off CUDA).

        It completes once every copy queued so far from an update's source tensors is done; work queued after it
        (the merge) may still be running.
        """
        self.sources_read = None
        if self.device.type == "cuda":
            self.sources_read = torch.cuda.Event()
            self.sources_read.record()

    def remerge_lora(self) -> None:
        """Fold the loaded LoRA adapters into the base weights again, from the pristine copies.

        `update_weights` does this itself; call it after writing into `weight_table(lora=False)` tensors directly
        (slices of large tensors). A no-op when `merge_lora` is off or no adapter is loaded.
        """
        if self.merge_lora and self.lora_adapters:
            if self._merge_plan is None:
                self._merge_plan = lora_merge.MergePlan(list(lora_merge.wrapped_layers(self.transformer).values()))
            self._merge_plan.run()
        self._merge_pending = False

    def weight_table(self, *, lora: bool, adapter_name: str = "default") -> dict[str, torch.Tensor]:
        """The tensors `update_weights` writes into, by canonical name (LoRA names without the adapter name).

        Full: every non-LoRA entry of the transformer's state dict (persistent buffers included; base weights
        under a LoRA adapter also by their plain name). For a merged LoRA layer the base weight entry is the
        pristine copy (the weight without the adapter), not the merged tensor the forward uses. LoRA: the
        adapter's `lora_A` / `lora_B` weights, named as `peft.get_peft_model_state_dict` names them; empty when
        no adapter is loaded.
        """
        return self._param_index(adapter_name, lora=lora)

    @property
    def lora_adapters(self) -> dict[str, Any]:
        """The peft configs of the loaded LoRA adapters, by adapter name."""
        return dict(getattr(self.transformer, "peft_config", None) or {})

    def add_lora(self, lora_config: Any, adapter_name: str = "default") -> None:
        """Add a LoRA adapter (peft `LoraConfig` or its dict) to the transformer; a no-op if one has that name.

        Raises:
            ValueError: the config wraps no module of the transformer (names `target_modules`).
        """
        self._ensure_lora(lora_config, adapter_name)

    def remove_lora(self, adapter_name: str = "default") -> None:
        """Remove the LoRA adapter `adapter_name` (the pristine base weights are served again, bit-exact)."""
        if adapter_name in self.lora_adapters:
            self._forget_lora_layout()
            lora_merge.restore(self.transformer)  # every base weight is pristine again (also those sleep dropped)
            self._merge_pending = False
            self.transformer.delete_adapters(adapter_name)
            self.remerge_lora()  # adapters left under other names

    def _ensure_lora(self, lora_config: Any, adapter_name: str) -> None:
        from peft import LoraConfig

        transformer = self.transformer
        if adapter_name in (getattr(transformer, "peft_config", None) or {}):
            return
        cfg = lora_config if isinstance(lora_config, LoraConfig) else LoraConfig(**dict(lora_config))
        names = [n for n, _ in transformer.named_modules() if n][:8]
        message = (
            f"lora_config.target_modules: {cfg.target_modules!r} wraps no module of the transformer; "
            f"module names look like {names}"
        )
        self._forget_lora_layout()
        try:
            transformer.add_adapter(cfg, adapter_name=adapter_name)
        except ValueError as e:
            (getattr(transformer, "peft_config", None) or {}).pop(adapter_name, None)
            if not hasattr(transformer, "peft_config"):  # peft dropped it: let the next add_adapter start afresh
                transformer._hf_peft_config_loaded = False
            raise ValueError(f"{message} ({e})") from e
        if not any(f"lora_A.{adapter_name}." in n for n, _ in transformer.named_parameters()):
            self.remove_lora(adapter_name)
            raise ValueError(message)
        if self.merge_lora:
            lora_merge.keep_adapter_fp32(transformer, adapter_name)

    def _forget_lora_layout(self) -> None:
        """Drop the cached merge plan and LoRA parameter index (the adapters are about to change)."""
        self._merge_plan: lora_merge.MergePlan | None = None
        self._lora_index: dict[str, dict[str, torch.Tensor]] = {}

    def _param_index(self, adapter_name: str, *, lora: bool) -> dict[str, torch.Tensor]:
        """Name -> tensor to load into: the adapter's LoRA weights (adapter name removed), or the full state."""
        if lora:  # cached until an adapter is added or removed (the Parameter objects outlive sleep and wake)
            if adapter_name not in self._lora_index:
                tag = f".{adapter_name}."
                named = self.transformer.named_parameters()
                index = {n.replace(tag, "."): p for n, p in named if ".lora_" in n and tag in n}
                self._lora_index[adapter_name] = index
            return dict(self._lora_index[adapter_name])
        # persistent buffers (e.g. SD3's pos_embed) are part of a full state dict; peft-wrapped base weights are
        # also reachable by their plain name (`to_q.weight` for `to_q.base_layer.weight`)
        pristine = lora_merge.pristine_tensors(self.transformer)  # merged layers: hand out W0, not W0 + delta
        state = self.transformer.state_dict(keep_vars=True).items()
        index = {k: pristine[id(v)][0] if id(v) in pristine else v for k, v in state if ".lora_" not in k}
        index.update({k.replace(".base_layer.", "."): v for k, v in index.items() if ".base_layer." in k})
        return index

    # ---- memory -----------------------------------------------------------------------------------

    def offload_modules(self) -> list[torch.nn.Module]:
        """The `torch.nn.Module` components of the pipeline (what `sleep` moves to host memory)."""
        return [c for c in self.pipeline.components.values() if isinstance(c, torch.nn.Module)]

    def sleep(self) -> None:
        """Move every parameter and buffer of the pipeline (LoRA pristine copies too) to host memory.

        On CUDA the tensors are repointed at pinned host copies allocated on the first sleep and reused after (see
        `HostOffload`), and their device memory is released; only tensors written since the last wake are copied,
        and the merged LoRA weights are dropped, not copied (the next `generate` or `update_weights` merges them
        again from the pristine copies). When pinning fails, the pipeline is moved with `.to("cpu")`, as on other
        accelerators (on a CPU device nothing moves). Weights may be updated while asleep (they are written into
        the host copies) and `wake_up` brings them back.
        """
        if self._host is None:
            self.pipeline.to("cpu")  # on a CPU device a no-op: the pipeline already lives there
        else:
            try:
                self._host.offload(self.offload_modules(), discard=self._recomputable())
            except RuntimeError as e:  # pinned memory unavailable: `.to("cpu")` from now on
                logger.warning("sleep: pinned host copies failed (%s); moving the pipeline with .to('cpu')", e)
                self._host = None
                self.pipeline.to("cpu")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def wake_up(self) -> None:
        """Move every parameter and buffer back to the engine's device (the host copies are kept for next sleep).

        Merged LoRA weights that sleep dropped are recomputed by the next `generate` or `update_weights`; call
        `remerge_lora()` first to run `transformer` directly.
        """
        if self._host is None:
            self.pipeline.to(self.device)
        else:
            self._host.onload(self.offload_modules(), self.device)
            self._merge_pending = self._merge_pending or bool(self._host.uninitialized)

    def _recomputable(self) -> list[torch.Tensor]:
        """The base parameters of merged LoRA layers: `remerge_lora` rewrites them from the pristine copies."""
        if not (self.merge_lora and self.lora_adapters):
            return []
        owners = lora_merge.pristine_tensors(self.transformer)
        return [p for p in self.transformer.parameters() if id(p) in owners]
