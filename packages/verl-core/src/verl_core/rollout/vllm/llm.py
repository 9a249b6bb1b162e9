"""`vLLMHttpServer`: LLM rollout on vLLM's `AsyncLLM`, with vLLM's OpenAI-compatible routes under `/openai`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verl_core.rollout.chat import ChatCompletionRequest, ChatInputs, forward_chat_completion
from verl_core.rollout.errors import NotReadyError
from verl_core.rollout.protocol import GenerateRequest, TokenGenerateResponse
from verl_core.rollout.sampling import LLMSamplingParams, parse_sampling_params
from verl_core.rollout.vllm import _adapter
from verl_core.rollout.vllm.base import BaseVLLMHttpServer

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion

__all__ = ["VLLMSamplingParams", "vLLMHttpServer"]


class VLLMSamplingParams(LLMSamplingParams):
    """LLM sampling keys plus the vLLM-only ones."""

    repetition_penalty: float = 1.0
    min_tokens: int = 0


class vLLMHttpServer(BaseVLLMHttpServer):
    """Serve an LLM with vLLM `AsyncLLM` (token ids or text in, token ids, text and log-probs out).

    Besides the base routes it mounts vLLM's OpenAI-compatible app under `/openai` (`/openai/v1/completions`,
    `/openai/v1/chat/completions`). The base route `/v1/chat/completions` checks the request as every backend does
    (fields, images, readiness, capacity), then forwards it in-process to that app's own chat serving, bounded by
    `rollout.request_timeout_s` (cancelling the forwarded call makes vLLM abort the request). Requires the `vllm`
    extra.
    """

    response_model = TokenGenerateResponse
    served_name = "verl"
    _openai_app: Any = None

    async def _create_engine(self, engine_args: dict[str, Any]) -> Any:
        return _adapter.create_async_llm(engine_args)

    async def _add_routes(self, app: Any) -> None:
        self._openai_app = await _adapter.mount_openai_routes(
            app, self._engine, self._engine_args or {}, served_name=self.served_name
        )

    async def _engine_chat(
        self, request_id: str, request: ChatCompletionRequest, inputs: ChatInputs, params: Any
    ) -> ChatCompletion:
        if self._openai_app is None:
            raise NotReadyError("vLLM's OpenAI app is not mounted yet")
        body = request.model_dump(exclude_none=True)
        body.update(model=self.served_name, request_id=request_id)  # vLLM's chat takes `request_id` too
        answer = await forward_chat_completion(self._openai_app, body)
        if request.model:  # answer with the name the caller used, as the HF backend does
            answer.model = request.model
        return answer

    def _validate_sampling_params(self, params: dict[str, Any]) -> VLLMSamplingParams:
        return parse_sampling_params(VLLMSamplingParams, self.config.sampling, params)  # type: ignore[return-value]

    async def _engine_generate(self, request_id: str, request: GenerateRequest, params: Any) -> dict[str, Any]:
        prompt = request.prompt if request.prompt is not None else _adapter.tokens_prompt(request.prompt_ids)
        sampling = _adapter.sampling_params(
            n=1,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            max_tokens=params.max_tokens,
            min_tokens=params.min_tokens,
            repetition_penalty=params.repetition_penalty,
            stop_token_ids=params.stop_token_ids,
            ignore_eos=params.ignore_eos,
            logprobs=0 if params.logprobs else None,
            seed=request.seed,
        )
        final = None
        async for output in self._engine.generate(
            prompt, sampling, request_id, lora_request=self._current_lora_request()
        ):
            final = output
        completion = final.outputs[0]
        token_ids = list(completion.token_ids)
        log_probs = None
        if params.logprobs and completion.logprobs:
            log_probs = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, token_ids)]
        reason = completion.finish_reason if completion.finish_reason in ("stop", "length", "abort") else "stop"
        return {"finish_reason": reason, "token_ids": token_ids, "text": completion.text, "log_probs": log_probs}
