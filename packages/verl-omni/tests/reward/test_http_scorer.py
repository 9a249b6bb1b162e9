"""`http` scorer: a real FastAPI reward service on uvicorn (in a thread) answers, fails, or hangs."""

from __future__ import annotations

import asyncio
import base64
import io
import socket
import threading
import time

import numpy as np
import pytest
import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from PIL import Image

from verl_omni.reward import RewardBatch, RewardConfig, RewardFunctionError, build_reward_manager
from verl_omni.reward.http_scorer import RewardServiceError, RewardServiceTimeout, compute_score

FAST = {"backoff_s": 0.01, "backoff_max_s": 0.05}


class Service:
    """The reward service: `/score` answers each image's mean pixel / 255; other routes misbehave on purpose."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.release = asyncio.Event()
        app = FastAPI()

        @app.post("/score")
        async def score(request: Request):
            body = await request.json()
            self.bodies.append(body)
            self.calls["score"] = self.calls.get("score", 0) + 1
            means = [
                float(np.asarray(Image.open(io.BytesIO(base64.b64decode(b)))).mean() / 255) for b in body["images"]
            ]
            return {"scores": means, "extra": {"prompt_len": [len(p) for p in body["prompts"]]}}

        @app.post("/flaky")
        async def flaky(request: Request):
            body = await request.json()
            self.calls["flaky"] = self.calls.get("flaky", 0) + 1
            if self.calls["flaky"] <= 2:
                return JSONResponse({"detail": "warming up"}, status_code=500)
            return {"scores": [1.0] * len(body["images"])}

        @app.post("/down")
        async def down():
            self.calls["down"] = self.calls.get("down", 0) + 1
            return JSONResponse({"detail": "model crashed"}, status_code=500)

        @app.post("/hang")
        async def hang():
            self.calls["hang"] = self.calls.get("hang", 0) + 1
            await asyncio.wait_for(self.release.wait(), 30)

        @app.post("/refuse")
        async def refuse():
            self.calls["refuse"] = self.calls.get("refuse", 0) + 1
            return JSONResponse({"detail": "images must be 512x512"}, status_code=422)

        @app.post("/short")
        async def short():
            return {"scores": [0.5]}

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", timeout_graceful_shutdown=1)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test reward service did not start")
            time.sleep(0.02)

    def url(self, route: str) -> str:
        return f"http://127.0.0.1:{self.port}/{route}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def service():
    s = Service()
    yield s
    s.stop()


def _images(n: int) -> torch.Tensor:
    return torch.stack([torch.full((3, 8, 8), 20 * i, dtype=torch.uint8) for i in range(n)])


def _score(url: str, n: int = 5, **kwargs):
    images = _images(n)
    return asyncio.run(
        compute_score(
            ["src"] * n, images, [{"text": f"t{i}"} for i in range(n)], [{"i": np.int64(i)} for i in range(n)],
            [f"p{'x' * i}" for i in range(n)], url=url, **kwargs,
        )
    )  # fmt: skip


def test_scores_come_back_in_order_across_batches(service):
    out = _score(service.url("score"), n=5, batch_size=2, max_concurrency=3)
    assert out["score"] == pytest.approx([20 * i / 255 for i in range(5)])
    assert out["prompt_len"] == [1, 2, 3, 4, 5]
    assert service.calls["score"] == 3 and sorted(len(b["images"]) for b in service.bodies) == [1, 2, 2]
    first = min(service.bodies, key=lambda b: b["prompts"][0])
    assert first["ground_truths"] == [{"text": "t0"}, {"text": "t1"}] and first["data_sources"] == ["src", "src"]
    assert first["extra_infos"] == [{"i": 0}, {"i": 1}]  # numpy values sent as JSON numbers


def test_500_twice_then_200_succeeds_with_retries(service):
    out = _score(service.url("flaky"), n=3, max_attempts=3, **FAST)
    assert out["score"] == [1.0, 1.0, 1.0] and service.calls["flaky"] == 3


def test_always_500_raises_naming_the_url_and_status_never_a_zero(service):
    url = service.url("down")
    with pytest.raises(RewardServiceError, match=rf"reward service {url}: HTTP 500 after 3 attempts: .*model crashed"):
        _score(url, n=2, max_attempts=3, **FAST)
    assert service.calls["down"] == 3


def test_a_refusing_service_is_not_retried(service):
    with pytest.raises(RewardServiceError, match=r"HTTP 422: .*must be 512x512") as info:
        _score(service.url("refuse"), n=1, **FAST)
    assert info.value.status == 422 and service.calls["refuse"] == 1


def test_a_hung_service_times_out_on_each_attempt(service):
    url = service.url("hang")
    start = time.monotonic()
    with pytest.raises(RewardServiceTimeout, match=rf"{url}: failed after 2 attempts: no answer within 0\.3 s"):
        _score(url, n=1, timeout_s=0.3, max_attempts=2, **FAST)
    assert time.monotonic() - start < 10 and service.calls["hang"] == 2


def test_a_short_answer_is_an_error(service):
    with pytest.raises(RewardServiceError, match=r"expected \{'scores': \[3 numbers\]\}, got 1 scores"):
        _score(service.url("short"), n=3)


def test_service_failure_stops_the_step_through_the_manager(service):
    config = RewardConfig(
        pool="thread",
        num_workers=1,
        reward_functions={"svc": {"builtin": "http", "reward_kwargs": {"url": service.url("down"), **FAST}}},
    )
    batch = RewardBatch(_images(2), ["a", "b"], ["s", "s"], [None, None], [{}, {}])
    with build_reward_manager(config) as manager, pytest.raises(RewardFunctionError, match="HTTP 500 after 3") as e:
        manager.score(batch, step=4)
    assert e.value.step == 4 and isinstance(e.value.__cause__, RewardServiceError)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({}, r"url: expected the http\(s\):// URL", id="no-url"),
        pytest.param({"url": "http://x", "batch_size": 0}, r"batch_size: expected an int >= 1", id="batch"),
        pytest.param({"url": "http://x", "timeout_s": 0}, r"timeout_s: expected a number of seconds > 0", id="timeout"),
    ],
)
def test_options_are_checked_at_start_up_naming_the_key(kwargs, match):
    config = RewardConfig(
        pool="thread", num_workers=1, reward_functions={"svc": {"builtin": "http", "reward_kwargs": kwargs}}
    )
    with pytest.raises(ValueError, match=r"^reward\.reward_functions\.svc\.reward_kwargs\." + match):
        build_reward_manager(config)
