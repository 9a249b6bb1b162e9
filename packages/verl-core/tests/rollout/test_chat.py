"""`POST /v1/chat/completions` through the real HTTP stack on a tiny random Qwen2.5-VL served by `HFHttpServer`."""

from __future__ import annotations

import base64
import io
import threading
import time

import httpx
import openai
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from PIL import Image

from verl_core.config import RolloutConfig
from verl_core.rollout.chat import ChatCompletionRequest, forward_chat_completion
from verl_core.rollout.errors import BadRequestError, NotReadyError
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.server_contract import run
from verl_core.testing.tiny_llm import build_tiny_vlm


def _data_url(color: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _ask(url: str, text: str = "what is in the image") -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}
    ]


@pytest.fixture(scope="module")
def vlm_path(tmp_path_factory):
    from transformers.utils import logging

    logging.disable_progress_bar()
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))


@pytest.fixture(scope="module")
def server(vlm_path):
    server = HFHttpServer(RolloutConfig(model={"path": str(vlm_path)}, device="cpu", request_timeout_s=30))
    run(server.launch())
    yield server
    run(server.shutdown())


@pytest.fixture(scope="module")
def client(server):
    http = httpx.Client(trust_env=False, timeout=30)
    yield openai.OpenAI(base_url=server.address + "/v1", api_key="unused", max_retries=0, http_client=http)
    http.close()


def test_chat_answers_an_image_question_as_an_openai_chat_completion(server, client):
    red, blue = _ask(_data_url((220, 10, 10))), _ask(_data_url((10, 10, 220)))
    answer = client.chat.completions.create(model="tiny-vlm", messages=red, max_tokens=6, temperature=0.0)
    assert answer.object == "chat.completion" and answer.model == "tiny-vlm" and answer.id.startswith("chatcmpl-")
    (choice,) = answer.choices
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    # the image reaches the model: its tokens count in the prompt, and another image changes the greedy answer
    text_only = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "what is in the image"}], max_tokens=1, temperature=0.0
    )
    assert answer.usage.prompt_tokens >= text_only.usage.prompt_tokens + 3  # vision start, image token(s), end
    other = client.chat.completions.create(model="m", messages=blue, max_tokens=6, temperature=0.0)
    assert other.choices[0].message.content != choice.message.content
    # n answers sampled from one seed: reproducible, and the usage counts all of them
    sampled = [
        client.chat.completions.create(model="m", messages=red, max_tokens=6, temperature=1.0, top_p=0.9, seed=7, n=2)
        for _ in range(2)
    ]
    assert [c.message.content for c in sampled[0].choices] == [c.message.content for c in sampled[1].choices]
    assert len(sampled[0].choices) == 2 and [c.index for c in sampled[0].choices] == [0, 1]
    assert 2 <= sampled[0].usage.completion_tokens <= 12


def test_chat_renders_the_chat_template_like_generate_does(server, client):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "the man said"}]
    answer = client.chat.completions.create(model="m", messages=messages, max_tokens=5, temperature=0.0)
    prompt = server._tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    direct = run(server.generate({"prompt": prompt, "sampling_params": {"max_tokens": 5, "temperature": 0.0}}))
    assert answer.choices[0].message.content == direct.text
    assert answer.usage.completion_tokens == len(direct.token_ids)


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        pytest.param({"foo": 1}, "foo", "unknown field `foo`", id="unknown-field"),
        pytest.param({"stream": True}, "stream", "stream", id="streaming"),
        pytest.param({"temperature": -1.0}, "temperature", "greater than or equal to 0", id="negative-temperature"),
        pytest.param(
            {"messages": _ask("data:image/png;base64,not*base64")},
            "messages.0.content.0.image_url.url",
            "invalid base64",
            id="bad-base64",
        ),
        pytest.param(
            {"messages": _ask("data:image/png;base64," + base64.b64encode(b"no image here").decode())},
            "messages.0.content.0.image_url.url",
            "not a readable image",
            id="not-an-image",
        ),
        pytest.param(
            {"messages": _ask("https://example.com/cat.png")},
            "messages.0.content.0.image_url.url",
            "base64 data URL",
            id="remote-url",
        ),
        pytest.param(
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
            "messages.0.content.0",
            "does not match any of the expected tags: 'text', 'image_url'",
            id="audio-part",
        ),
        pytest.param({"max_tokens": 600}, "max_tokens", "exceeds the context of 512", id="context-overflow"),
    ],
)
def test_chat_refuses_bad_requests_with_422_naming_the_field(server, change, field, message):
    body = {"model": "m", "messages": _ask(_data_url((0, 200, 0))), "max_tokens": 2, **change}
    response = httpx.post(server.address + "/v1/chat/completions", json=body, trust_env=False, timeout=30)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "BadRequestError" and error["field"] == field
    assert message in error["message"]
    assert server.readiness() == (True, "ready")  # the server keeps serving


def test_chat_on_a_text_model_without_a_chat_template_names_the_problem(tiny_llm_path):
    server = HFHttpServer(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"))
    run(server.launch())
    try:
        with pytest.raises(BadRequestError, match="has no chat template") as info:
            run(server.chat({"messages": [{"role": "user", "content": "hi"}]}))
        assert info.value.field == "messages"
    finally:
        run(server.shutdown())


def test_chat_on_a_hung_engine_answers_504_within_the_timeout(vlm_path):
    release = threading.Event()
    aborted: list[list[str]] = []

    class StuckThread(HFHttpServer):
        async def _engine_chat(self, request_id, request, inputs, params):
            await self._run_blocking(release.wait, 30)
            return await super()._engine_chat(request_id, request, inputs, params)

        async def _engine_abort(self, request_ids):
            aborted.append(request_ids)
            await super()._engine_abort(request_ids)

    server = StuckThread(RolloutConfig(model={"path": str(vlm_path)}, device="cpu", request_timeout_s=0.4))
    run(server.launch())
    try:
        body = {"messages": _ask(_data_url((9, 9, 9))), "max_tokens": 2, "request_id": "stuck-1"}
        start = time.perf_counter()
        response = httpx.post(server.address + "/v1/chat/completions", json=body, trust_env=False, timeout=20)
        assert time.perf_counter() - start < 5
        assert response.status_code == 504, response.text
        assert "request_timeout_s" in response.json()["error"]["message"]
        assert aborted == [["stuck-1"]]  # the timed-out request is aborted in the engine, and no longer in flight
        assert server.metrics_snapshot()["inflight"] == 0
        release.set()
        answer = httpx.post(server.address + "/v1/chat/completions", json=body, trust_env=False, timeout=20)
        assert answer.status_code == 200 and answer.json()["id"] == "stuck-1"
    finally:
        release.set()
        run(server.shutdown())


def _fake_openai_app() -> FastAPI:
    """An OpenAI-compatible app that answers with what it received (vLLM's mounted app in the real server)."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict) -> JSONResponse:
        if body["messages"][0]["content"] == "fail":
            return JSONResponse({"error": {"message": "bad prompt"}}, status_code=400)
        seen = f"{body['model']} {body.get('request_id')} {body.get('max_tokens')} {body.get('seed')}"
        return JSONResponse({
            "id": body.get("request_id", "chatcmpl-x"), "object": "chat.completion", "created": 1,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": seen}}],
        })  # fmt: skip

    return app


def test_forward_chat_completion_reads_an_openai_app_and_keeps_its_errors():
    app = _fake_openai_app()
    answer = run(forward_chat_completion(app, {"model": "verl", "messages": [{"role": "user", "content": "hi"}]}))
    assert answer.choices[0].message.content == "verl None None None" and answer.model == "verl"
    with pytest.raises(BadRequestError, match=r"answered 400: .*bad prompt"):
        run(forward_chat_completion(app, {"model": "verl", "messages": [{"role": "user", "content": "fail"}]}))


def test_vllm_chat_forwards_the_checked_request_to_the_mounted_openai_app(monkeypatch):
    from verl_core.rollout.chat import chat_inputs
    from verl_core.rollout.vllm import vLLMHttpServer

    monkeypatch.setattr(vLLMHttpServer, "_require_backend", lambda self: None)  # vllm is not needed to forward
    server = vLLMHttpServer(RolloutConfig(model={"path": "/m"}, name="vllm"))
    request = ChatCompletionRequest.model_validate(
        {"model": "judge", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "seed": 5}
    )
    with pytest.raises(NotReadyError, match="not mounted"):
        run(server._engine_chat("chatcmpl-1", request, chat_inputs(request), None))
    server._openai_app = _fake_openai_app()
    answer = run(server._engine_chat("chatcmpl-1", request, chat_inputs(request), None))
    assert answer.choices[0].message.content == "verl chatcmpl-1 3 5"  # served name, our id, the sampling fields
    assert answer.id == "chatcmpl-1" and answer.model == "judge"
