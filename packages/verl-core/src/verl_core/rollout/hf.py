"""`HFHttpServer`: the embedded LLM backend, transformers `generate` in-process (CPU or one GPU), VLM chat included."""

from __future__ import annotations

import gc
import threading
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoTokenizer,
    StoppingCriteria,
    StoppingCriteriaList,
)

from verl_core.config.rollout import RolloutConfig
from verl_core.rollout.chat import ChatCompletionRequest, ChatInputs, chat_completion
from verl_core.rollout.devices import resolve_device
from verl_core.rollout.errors import BadRequestError, ConflictError, NotReadyError, WeightSyncError
from verl_core.rollout.protocol import GenerateRequest, TokenGenerateResponse
from verl_core.rollout.sampling import LLMSamplingParams, parse_sampling_params
from verl_core.rollout.server import RolloutHttpServer
from verl_core.rollout.weights import WeightKind, WeightUpdate, check_manifest

__all__ = ["HFHttpServer"]

# transformers samples from torch's process-wide RNG; servers sharing a process take turns so seeds hold.
_RNG_LOCK = threading.Lock()
_DTYPES = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class _StopOnAbort(StoppingCriteria):
    """Stops generation at the next token once the request's abort flag is set."""

    def __init__(self, flag: threading.Event) -> None:
        self.flag = flag

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.flag.is_set(), dtype=torch.bool, device=input_ids.device)


class HFHttpServer(RolloutHttpServer):
    """Serve a causal LM with transformers `generate` on the server's engine thread.

    Requests run one at a time (the engine thread is single); abort stops a request at its next token.
    `/v1/chat/completions` renders the messages with the tokenizer's chat template; a vision-language model (a config
    with a `vision_config`, loaded with `AutoModelForImageTextToText`) also takes images, prepared by the folder's
    image processor, each image's placeholder token repeated once per merged patch as Qwen-VL processors do
    (`image_grid_thw` / `merge_size`). `n` answers are sampled one after another from one seed.
    `sleep(1)` moves the weights to host memory (a no-op on CPU), `sleep(2)` frees them and `wake_up`
    reloads the checkpoint, after which the weight version is 0 again. `update_weights` copies full
    tensors in place (names as in the model's `state_dict`) or loads LoRA tensors through peft; a rejected
    LoRA update leaves the served adapter as it was.

    Args:
        config (`RolloutConfig`): `model.path` is a transformers folder; `device` picks CPU or GPU.
        rank (`int`, *optional*, defaults to `0`): server rank.
    """

    response_model = TokenGenerateResponse

    def __init__(self, config: RolloutConfig, *, rank: int = 0) -> None:
        super().__init__(config, rank=rank)
        self._device = resolve_device(config.device)
        self._model: Any = None
        self._peft: Any = None
        self._peft_config: dict[str, Any] | None = None
        self._tokenizer: Any = None
        self._image_processor: Any = None
        self._abort_flags: dict[str, threading.Event] = {}
        self._full_table: dict[str, torch.Tensor] = {}
        self._lora_pending: dict[str, torch.Tensor] = {}
        self._lora_previous: tuple[dict[str, Any] | None, dict[str, torch.Tensor]] | None = None  # (config, tensors)

    # ---- load / generate ------------------------------------------------------------------------

    async def _engine_load(self) -> None:
        await self._run_blocking(self._load_model)

    def _load_model(self) -> None:
        model_cfg = self.config.model
        remote = {"trust_remote_code": model_cfg.trust_remote_code}
        vision = hasattr(AutoConfig.from_pretrained(model_cfg.path, **remote), "vision_config")
        auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
        model = auto.from_pretrained(model_cfg.path, dtype=_DTYPES[model_cfg.dtype], **remote)
        self._model = model.to(self._device).eval()
        self._peft, self._peft_config = None, None
        if self._tokenizer is None:
            self._tokenizer = AutoTokenizer.from_pretrained(model_cfg.tokenizer_path or model_cfg.path, **remote)
        if vision and self._image_processor is None:
            self._image_processor = AutoImageProcessor.from_pretrained(model_cfg.path, **remote)

    def _validate_sampling_params(self, params: dict[str, Any]) -> LLMSamplingParams:
        return parse_sampling_params(LLMSamplingParams, self.config.sampling, params)

    async def _engine_generate(self, request_id: str, request: GenerateRequest, params: Any) -> dict[str, Any]:
        ids = request.prompt_ids if request.prompt_ids is not None else self._tokenizer(request.prompt).input_ids
        vocab = self._model.config.get_text_config().vocab_size
        bad = next((i for i, t in enumerate(ids) if not 0 <= t < vocab), None)
        if bad is not None:
            message = f"prompt_ids[{bad}] = {ids[bad]} is outside the vocabulary [0, {vocab})"
            raise BadRequestError(message, field="prompt_ids")
        limit = self.config.max_model_len or getattr(self._model.config.get_text_config(), "max_position_embeddings", 0)
        if limit and len(ids) + params.max_tokens > limit:
            raise BadRequestError(
                f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the context of {limit}",
                field="sampling_params.max_tokens",
            )
        flag = threading.Event()
        self._abort_flags[request_id] = flag
        try:
            return await self._run_blocking(self._generate_blocking, ids, params, request.seed, flag)
        finally:
            flag.set()  # a cancelled (timed-out) request stops at its next token
            self._abort_flags.pop(request_id, None)

    def _generate_blocking(
        self, ids: list[int], params: LLMSamplingParams, seed: int | None, flag: threading.Event
    ) -> dict[str, Any]:
        if flag.is_set():
            return {"finish_reason": "abort", "token_ids": [], "text": ""}
        if self._model is None:
            raise NotReadyError("weights are not loaded (asleep at level 2); call wake_up()")
        with _RNG_LOCK:
            if seed is not None:
                torch.manual_seed(seed)
            out, new, reason = self._sample(torch.tensor([ids], device=self._device), {}, params, flag)
        fields: dict[str, Any] = {"finish_reason": reason, "token_ids": new}
        fields["text"] = self._tokenizer.decode(new, skip_special_tokens=True)
        if params.logprobs:
            scores = self._model.compute_transition_scores(out.sequences, out.logits, normalize_logits=True)
            fields["log_probs"] = scores[0].float().tolist()
        return fields

    def _sample(
        self, input_ids: torch.Tensor, extra: dict[str, torch.Tensor], params: LLMSamplingParams, flag: threading.Event
    ) -> tuple[Any, list[int], str]:
        """One `generate` call (caller holds `_RNG_LOCK`); returns its output, the new token ids and why it stopped."""
        eos = list(params.stop_token_ids)
        if not params.ignore_eos and self._tokenizer.eos_token_id is not None:
            eos.append(self._tokenizer.eos_token_id)
        kwargs: dict[str, Any] = {"max_new_tokens": params.max_tokens, "do_sample": params.temperature > 0}
        if params.temperature > 0:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=max(params.top_k, 0))
        model = self._peft if self._peft is not None else self._model
        with torch.inference_mode():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                eos_token_id=eos or None,
                pad_token_id=self._tokenizer.pad_token_id if self._tokenizer.pad_token_id is not None else 0,
                stopping_criteria=StoppingCriteriaList([_StopOnAbort(flag)]),
                return_dict_in_generate=True,
                output_logits=params.logprobs,
                **extra,
                **kwargs,
            )
        new = out.sequences[0, input_ids.shape[1] :].tolist()
        if new and new[-1] in eos:
            reason = "stop"
        elif len(new) >= params.max_tokens:
            reason = "length"
        else:
            reason = "abort" if flag.is_set() else "stop"
        return out, new, reason

    # ---- chat -----------------------------------------------------------------------------------

    async def _engine_chat(
        self, request_id: str, request: ChatCompletionRequest, inputs: ChatInputs, params: Any
    ) -> Any:
        flag = threading.Event()
        self._abort_flags[request_id] = flag
        try:
            texts, reasons, prompt_len, new_len = await self._run_blocking(
                self._chat_blocking, inputs, params, request.seed, request.n, flag
            )
        finally:
            flag.set()  # a cancelled (timed-out) request stops at its next token
            self._abort_flags.pop(request_id, None)
        if "abort" in reasons:
            raise ConflictError(f"chat request {request_id!r} was aborted", field="request_id")
        model = request.model or self.config.model.path
        return chat_completion(request_id, model, texts, reasons, prompt_len, new_len)

    def _chat_blocking(
        self, inputs: ChatInputs, params: LLMSamplingParams, seed: int | None, n: int, flag: threading.Event
    ) -> tuple[list[str], list[str], int, int]:
        if self._model is None:
            raise NotReadyError("weights are not loaded (asleep at level 2); call wake_up()")
        ids, extra = self._chat_prompt(inputs)
        limit = self.config.max_model_len or getattr(self._model.config.get_text_config(), "max_position_embeddings", 0)
        if limit and len(ids) + params.max_tokens > limit:
            raise BadRequestError(
                f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the context of {limit}",
                field="max_tokens",
            )
        input_ids = torch.tensor([ids], device=self._device)
        texts, reasons, new_len = [], [], 0
        with _RNG_LOCK:
            if seed is not None:
                torch.manual_seed(seed)
            for _ in range(n):
                _, new, reason = self._sample(input_ids, extra, params, flag)
                texts.append(self._tokenizer.decode(new, skip_special_tokens=True))
                reasons.append(reason)
                new_len += len(new)
        return texts, reasons, len(ids), new_len

    def _chat_prompt(self, inputs: ChatInputs) -> tuple[list[int], dict[str, torch.Tensor]]:
        """Token ids of the rendered chat, and the image tensors `generate` takes beside them."""
        path = self.config.model.path
        if not getattr(self._tokenizer, "chat_template", None):
            raise BadRequestError(f"the model at {path} has no chat template; use /generate", field="messages")
        if inputs.images and self._image_processor is None:
            raise BadRequestError(
                f"the model at {path} is text-only (no vision_config); send text parts only", field="messages"
            )
        text = self._tokenizer.apply_chat_template(inputs.messages, add_generation_prompt=True, tokenize=False)
        extra: dict[str, torch.Tensor] = {}
        if inputs.images:
            pixels = self._image_processor(images=inputs.images, return_tensors="pt")
            grid, merge = pixels.get("image_grid_thw"), getattr(self._image_processor, "merge_size", None)
            token_id = getattr(self._model.config, "image_token_id", None)
            if grid is None or merge is None or token_id is None:
                raise BadRequestError(
                    f"images are served for Qwen-VL-style models (image_grid_thw, merge_size); {path} is "
                    f"{type(self._model).__name__}",
                    field="messages",
                )
            token = self._tokenizer.convert_ids_to_tokens(token_id)
            pieces = text.split(token)
            if len(pieces) - 1 != len(inputs.images):
                raise BadRequestError(
                    f"the chat template placed {len(pieces) - 1} image tokens for {len(inputs.images)} images",
                    field="messages",
                )
            counts = (grid.prod(-1) // merge**2).tolist()
            text = pieces[0] + "".join(token * count + rest for count, rest in zip(counts, pieces[1:]))
            dtype = next(self._model.parameters()).dtype
            extra = {
                k: v.to(self._device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in pixels.items()
            }
        return self._tokenizer(text, add_special_tokens=False).input_ids, extra

    async def _engine_abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            flag = self._abort_flags.get(request_id)
            if flag is not None:
                flag.set()

    # ---- sleep / wake ---------------------------------------------------------------------------

    async def _engine_sleep(self, level: int) -> None:
        await self._run_blocking(self._sleep_blocking, level)

    def _sleep_blocking(self, level: int) -> None:
        if level == 2:
            self._model, self._peft, self._peft_config = None, None, None
        elif self._device.type != "cpu":
            self._model.to("cpu")
        else:
            return  # level 1 on the CPU frees nothing: skip the full collection (0.2-0.8 s in a trainer's process)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    async def _engine_wake_up(self, tags: list[str]) -> None:
        if "weights" not in tags:
            return  # transformers keeps no KV cache between requests
        if self._model is None:
            await self._run_blocking(self._load_model)
            self._set_weight_version(0)
        elif self._device.type != "cpu":
            await self._run_blocking(self._model.to, self._device)

    # ---- weight sync ----------------------------------------------------------------------------

    async def _engine_begin_weights(self, update: WeightUpdate) -> None:
        if self._model is None:
            raise NotReadyError("weights were dropped by sleep(level=2); call wake_up() before update_weights")
        if update.kind == "full":
            table = self._model.state_dict(keep_vars=True)
            self._full_table = {k.replace(".base_layer.", "."): v for k, v in table.items() if ".lora_" not in k}
            check_manifest(update.manifest, {k: tuple(v.shape) for k, v in self._full_table.items()})
        else:
            await self._run_blocking(self._prepare_lora, update)

    def _prepare_lora(self, update: WeightUpdate) -> None:
        from peft import get_peft_config, get_peft_model_state_dict

        config = {"peft_type": "LORA", **dict(update.peft_config or {})}
        try:
            peft_config = get_peft_config(config)
        except Exception as e:
            raise WeightSyncError(f"peft_config rejected by peft: {type(e).__name__}: {e}", field="peft_config") from e
        self._lora_previous = None
        if self._peft is None or config != self._peft_config:
            old = get_peft_model_state_dict(self._peft) if self._peft is not None else {}
            self._lora_previous = (self._peft_config, old)
            self._swap_adapter(config, peft_config)
        try:
            expected = {k: tuple(v.shape) for k, v in get_peft_model_state_dict(self._peft).items()}
            check_manifest(update.manifest, expected)
            missing = sorted(set(expected) - {s.name for s in update.manifest})
            if missing:
                raise WeightSyncError(
                    f"LoRA update lacks {len(missing)} of the adapter's {len(expected)} tensors, e.g. {missing[0]!r}",
                    field=missing[0],
                )
        except WeightSyncError:
            self._restore_adapter()
            raise
        self._lora_pending = {}

    def _swap_adapter(self, config: dict[str, Any], peft_config: Any) -> None:
        """Serve a fresh adapter of `config`; `_restore_adapter` brings back the one in `_lora_previous`."""
        from peft import get_peft_model

        base = self._peft.unload() if self._peft is not None else self._model
        self._model, self._peft, self._peft_config = base, None, None
        try:
            self._peft = get_peft_model(base, peft_config).eval()
        except Exception as e:
            self._restore_adapter()
            raise WeightSyncError(f"cannot apply peft_config: {type(e).__name__}: {e}", field="peft_config") from e
        self._peft_config = config

    def _restore_adapter(self) -> None:
        """After a rejected LoRA update that swapped the adapter: serve the previous adapter (or none) again."""
        previous, self._lora_previous = self._lora_previous, None
        if previous is None:
            return
        from peft import get_peft_config, get_peft_model, set_peft_model_state_dict

        old_config, old_tensors = previous
        if self._peft is not None:
            self._model = self._peft.unload()
        self._peft, self._peft_config = None, None
        if old_config is not None:
            self._peft = get_peft_model(self._model, get_peft_config(old_config)).eval()
            set_peft_model_state_dict(self._peft, old_tensors)
            self._peft_config = old_config

    async def _engine_load_bucket(self, update: WeightUpdate, tensors: list[tuple[str, torch.Tensor]]) -> None:
        if update.kind == "full":
            await self._run_blocking(self._copy_full, tensors)
        else:
            self._lora_pending.update((name, t.clone()) for name, t in tensors)

    async def _engine_load_slice(self, update: WeightUpdate, name: str, start: int, chunk: torch.Tensor) -> None:
        if update.kind != "full":
            return await super()._engine_load_slice(update, name, start, chunk)
        await self._run_blocking(self._copy_slice, name, start, chunk)

    def _copy_slice(self, name: str, start: int, chunk: torch.Tensor) -> None:
        with torch.no_grad():  # in place: no whole-tensor buffer for tensors larger than a bucket
            self._full_table[name].view(-1)[start : start + chunk.numel()].copy_(chunk)

    def _copy_full(self, tensors: list[tuple[str, torch.Tensor]]) -> None:
        with torch.no_grad():
            for name, tensor in tensors:
                self._full_table[name].copy_(tensor)

    async def _engine_finish_weights(self, update: WeightUpdate) -> None:
        if update.kind == "lora":
            from peft import set_peft_model_state_dict

            pending, self._lora_pending = self._lora_pending, {}
            await self._run_blocking(set_peft_model_state_dict, self._peft, pending)
            self._lora_previous = None
        self._full_table = {}

    async def _engine_abort_weights(self, update: WeightUpdate) -> None:
        self._full_table, self._lora_pending = {}, {}
        if update.kind == "lora":
            await self._run_blocking(self._restore_adapter)

    async def _engine_read_weights(self, names: list[str], kind: WeightKind) -> dict[str, torch.Tensor]:
        if self._model is None:
            raise NotReadyError("weights are not loaded (asleep at level 2); call wake_up()")
        if kind == "lora":
            from peft import get_peft_model_state_dict

            table = get_peft_model_state_dict(self._peft) if self._peft is not None else {}
        else:
            state = self._model.state_dict()
            table = {k.replace(".base_layer.", "."): v for k, v in state.items() if ".lora_" not in k}
        unknown = [n for n in names if n not in table]
        if unknown:
            raise KeyError(f"{kind} tensor {unknown[0]!r} is not served ({len(table)} {kind} tensors are)")
        return {n: table[n] for n in names}

    async def _engine_shutdown(self) -> None:
        self._model, self._peft, self._tokenizer, self._image_processor = None, None, None, None
        gc.collect()

    def _engine_metrics(self) -> dict[str, Any]:
        model = self._model
        on_device = 0
        if model is not None:
            on_device = sum(p.numel() * p.element_size() for p in model.parameters() if p.device.type != "cpu")
        return {
            "device": str(self._device),
            "weights_resident": model is not None,
            "lora_active": self._peft is not None,
            "param_bytes_on_accelerator": on_device,
        }
