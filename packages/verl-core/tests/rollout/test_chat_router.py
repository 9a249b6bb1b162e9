"""`ChatRouterServer`: one OpenAI chat address over two HF VLM servers (spreading, errors passed on, dead ranks)."""

from __future__ import annotations

import asyncio
import base64
import io

import httpx
import pytest
from PIL import Image

from verl_core.config import RolloutConfig
from verl_core.rollout.chat_router import SERVER_RANK_HEADER, ChatRouterServer
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.hf import HFHttpServer
from verl_core.rollout.replica import RolloutRouter
from verl_core.testing.server_contract import run
from verl_core.testing.tiny_llm import build_tiny_vlm


def _body(color: tuple[int, int, int]) -> dict:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), color).save(buffer, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "read the text"}]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 4, "temperature": 0.0}


@pytest.fixture(scope="module")
def vlm_path(tmp_path_factory):
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))


def test_chat_router_spreads_passes_errors_and_names_dead_ranks(vlm_path):
    config = RolloutConfig(model={"path": str(vlm_path)}, device="cpu", request_timeout_s=30)
    servers = [HFHttpServer(config, rank=r) for r in range(2)]
    for s in servers:
        run(s.launch())

    async def scenario():
        router = RolloutRouter([RolloutClient(s.address, rank=s.rank, timeout_s=30) for s in servers])
        proxy = ChatRouterServer(router)
        address = await proxy.start()
        try:
            async with httpx.AsyncClient(base_url=f"http://{address}", trust_env=False, timeout=30) as http:
                answers = await asyncio.gather(*(http.post("/v1/chat/completions", json=_body((200, 0, 0)))
                                                 for _ in range(4)))  # fmt: skip
                bad = await http.post("/v1/chat/completions", json={**_body((0, 0, 0)), "logit_bias": {}})
                not_json = await http.post("/v1/chat/completions", content=b"{nope")
                await servers[0].shutdown()  # rank 0 dies: the proxy routes around it and says so
                after = await http.post("/v1/chat/completions", json=_body((200, 0, 0)))
                health = (await http.get("/health")).json()
                await servers[1].shutdown()
                none_left = await http.post("/v1/chat/completions", json=_body((200, 0, 0)))
        finally:
            await proxy.stop()
            await router.aclose()
        return answers, bad, not_json, after, health, none_left

    try:
        answers, bad, not_json, after, health, none_left = run(scenario())
    finally:
        for s in servers:
            run(s.shutdown())
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    assert sorted(a.headers[SERVER_RANK_HEADER] for a in answers) == ["0", "0", "1", "1"]  # least outstanding
    texts = {a.json()["choices"][0]["message"]["content"] for a in answers}
    assert len(texts) == 1  # same weights, greedy: the same transcription whichever server answered
    assert bad.status_code == 422 and "logit_bias" in bad.json()["error"]["message"]  # the server's own error
    assert not_json.status_code == 400 and not_json.json()["error"]["field"] == "body"
    assert after.status_code == 200 and after.headers[SERVER_RANK_HEADER] == "1"
    assert health["live_ranks"] == [1] and "rank 0" in health["dead_ranks"]["0"]
    assert none_left.status_code == 502 and "dead ranks: 0" in none_left.json()["error"]["message"]
