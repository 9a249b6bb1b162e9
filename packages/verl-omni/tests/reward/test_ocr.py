"""The built-in `ocr` reward: the edit-distance score on known strings, and the transcription through a real server.

The server tests run `compute_score_ocr` (and the old verl signature) against a tiny random Qwen2.5-VL served by
verl-core's `HFHttpServer` over HTTP: what the model answers is random, but the score must equal the similarity
of that exact answer to the ground truth.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.server_contract import run
from verl_core.testing.tiny_llm import build_tiny_vlm
from verl_omni.reward import RewardBatch, RewardConfig, build_scorer
from verl_omni.reward.ocr import OCR_PROMPT, compute_score_ocr, image_data_url, ocr_similarity
from verl_omni.reward.reward_model import RewardModelEndpoint


@pytest.mark.parametrize(
    ("transcription", "ground_truth", "expected"),
    [
        pytest.param("Hello World", "Hello World", 1.0, id="exact"),
        pytest.param("hello world", "HELLO  World", 1.0, id="case and whitespace ignored"),
        pytest.param("hallo", "hello", 0.8, id="one substitution"),
        pytest.param("helo", "hello", 0.8, id="one deletion"),
        pytest.param("", "", 1.0, id="both empty"),
        pytest.param("abc", "", 0.0, id="empty ground truth, text read"),
        pytest.param("", "abcd", 0.0, id="nothing read"),
        pytest.param("hello world", "hello", 0.5, id="hallucinated extra text"),
        pytest.param("xyz", "abc", 0.0, id="nothing matches"),
    ],
)
def test_ocr_similarity_on_known_strings(transcription, ground_truth, expected):
    assert ocr_similarity(transcription, ground_truth) == pytest.approx(expected)


def test_ocr_similarity_refuses_non_strings():
    with pytest.raises(TypeError, match="compares strings"):
        ocr_similarity(None, "a")  # type: ignore[arg-type]


def test_image_data_url_round_trips_the_pixels():
    import base64
    import io

    import numpy as np
    from PIL import Image

    image = torch.randint(0, 256, (3, 8, 6), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    url = image_data_url(image)
    assert url.startswith("data:image/png;base64,")
    decoded = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))))
    assert decoded.shape == (8, 6, 3) and (decoded == image.permute(1, 2, 0).numpy()).all()


@pytest.fixture(scope="module")
def vlm_server(tmp_path_factory):
    path = build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))
    server = HFHttpServer(RolloutConfig(model={"path": str(path)}, device="cpu", request_timeout_s=30))
    run(server.launch())
    yield server
    run(server.shutdown())


def _image(seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _transcribe(server: HFHttpServer, image: torch.Tensor) -> str:
    content = [{"type": "image_url", "image_url": {"url": image_data_url(image)}}, {"type": "text", "text": OCR_PROMPT}]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 8, "temperature": 0.0}
    answer = httpx.post(server.address + "/v1/chat/completions", json=body, timeout=30, trust_env=False)
    answer.raise_for_status()
    return answer.json()["choices"][0]["message"]["content"]


def test_compute_score_ocr_scores_the_models_transcription(vlm_server):
    image = _image(0)
    read = _transcribe(vlm_server, image)
    address = vlm_server.address.removeprefix("http://")
    for truth in (read, read + " extra", "something else"):
        score = asyncio.run(
            compute_score_ocr("flow_grpo/ocr", image, truth, {}, address, model_name="tiny", max_tokens=8)
        )
        assert score == pytest.approx(ocr_similarity(read, truth))
    assert 0.0 <= score < 1.0


def test_compute_score_ocr_without_a_reward_model_or_with_a_dead_router_raises():
    with pytest.raises(ValueError, match=r"reward\.reward_model\.enable=true"):
        asyncio.run(compute_score_ocr("ocr", _image(0), "abc", {}, None))
    with pytest.raises(ValueError, match="ground_truth"):
        asyncio.run(compute_score_ocr("ocr", _image(0), None, {}, "127.0.0.1:9"))  # type: ignore[arg-type]
    with pytest.raises(httpx.ConnectError):
        asyncio.run(compute_score_ocr("ocr", _image(0), "abc", {}, "127.0.0.1:9", timeout_s=5))


OLD_REWARD_FN = """
    from verl_omni.reward.ocr import compute_score_ocr as _score

    SEEN = []

    async def compute_score_ocr(data_source, solution_image, ground_truth, extra_info, reward_router_address,
                                reward_model_tokenizer=None, model_name=None):
        SEEN.append((reward_router_address, reward_model_tokenizer.eos_token, model_name))
        return await _score(data_source, solution_image, ground_truth, extra_info, reward_router_address,
                            reward_model_tokenizer, model_name, max_tokens=8)
"""


def test_old_compute_score_ocr_signature_gets_the_reward_model_arguments(vlm_server, write_reward_file):
    path = write_reward_file(OLD_REWARD_FN, name="reward_fn.py")
    custom = {"custom_reward_function": {"path": path, "name": "compute_score_ocr"}, "pool": "thread"}
    # without a reward model the required reward_router_address is never passed: refused at load, naming the key
    with pytest.raises(TypeError, match=r"reward_router_address.*reward\.reward_model\.enable=true"):
        build_scorer(RewardConfig(**custom))
    config = RewardConfig(**custom, reward_model={"enable": True, "model_path": "unused"})
    address = vlm_server.address.removeprefix("http://")
    endpoint = RewardModelEndpoint(address, "tiny-vlm", vlm_server.config.model.path)
    scorer = build_scorer(config, reward_model=endpoint)
    images = torch.stack([_image(1), _image(2)])
    read = [_transcribe(vlm_server, im) for im in images]
    batch = RewardBatch(images, ["p", "q"], ["flow_grpo/ocr"] * 2, ["abc", read[1]], [{}, {}])
    out = scorer(batch)
    assert out.scores.tolist() == pytest.approx([ocr_similarity(read[0], "abc"), 1.0])
    seen = scorer.function.fn.__globals__["SEEN"]
    assert seen == [(address, "<|im_end|>", "tiny-vlm")] * 2  # the served model's own tokenizer
