"""`vlm_judge`: a tiny random Qwen2.5-VL served by verl-core's `HFHttpServer` judges images over `/v1/chat/completions`.

The server tests run the whole path (template, PNG data URL, `AsyncOpenAI`, the real server, the parse); the answers
of a random model are gibberish, so the parse itself is tested on written answers (`JudgeSpec.parse`).
"""

from __future__ import annotations

import asyncio
import logging

import httpx
import openai
import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.server_contract import run
from verl_core.testing.tiny_llm import build_tiny_vlm
from verl_omni.reward import RewardBatch, RewardConfig, RewardFunctionError, build_reward_manager
from verl_omni.reward.vlm_judge import JudgeSpec, compute_score, image_data_url, router_base_url

PROMPTS = ["a red cat", "a dog", "a house", "the sea"]


@pytest.fixture(scope="module")
def judge_server(tmp_path_factory):
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))
    server = HFHttpServer(RolloutConfig(model={"path": str(path)}, device="cpu", request_timeout_s=30))
    run(server.launch())
    yield server
    run(server.shutdown())


@pytest.fixture
def images():
    return torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


def _direct_answers(server, images, texts, max_tokens=12):
    """What the server answers to each image + text when asked directly with the openai client."""
    http = httpx.Client(trust_env=False, timeout=30)
    client = openai.OpenAI(base_url=server.address + "/v1", api_key="x", max_retries=0, http_client=http)
    out = []
    for image, text in zip(images, texts):
        content = [{"type": "image_url", "image_url": {"url": image_data_url(image)}}, {"type": "text", "text": text}]
        reply = client.chat.completions.create(
            model="judge", messages=[{"role": "user", "content": content}], max_tokens=max_tokens, temperature=0.0
        )
        out.append(reply.choices[0].message.content)
    http.close()
    return out


def _judge(server, images, **kwargs):
    address = server.address.split("://", 1)[1]  # "host:port", as the trainer's router address
    n = images.shape[0]
    return asyncio.run(
        compute_score(
            ["ocr"] * n, images, [f"gt{i}" for i in range(n)], [{} for _ in range(n)], PROMPTS[:n],
            reward_router_address=address, model_name="judge", max_tokens=12, **kwargs,
        )
    )  # fmt: skip


def test_judge_sends_the_rendered_template_and_image_and_scores_the_choice(judge_server, images):
    template = "Prompt: {prompt}. Expected text: {ground_truth}. Answer {choices}."
    texts = [f"Prompt: {p}. Expected text: gt{i}. Answer YES / NO." for i, p in enumerate(PROMPTS)]
    direct = _direct_answers(judge_server, images, texts)
    assert len(set(direct)) == 4 and all(direct)  # each image (and text) gets its own answer
    # the choices are two of the answers the server gives: only a request identical to the direct one matches
    choices = {direct[0]: 1.0, direct[2]: 0.25}
    out = _judge(
        judge_server, images, prompt_template=template.replace("{choices}", "YES / NO"), choices=choices,
        on_unparsable="score", unparsable_score=0.5,
    )  # fmt: skip
    assert out["judge_answer"] == direct
    assert out["score"] == [1.0, 0.5, 0.25, 0.5]
    assert out["judge_unparsable"] == [0, 1, 0, 1]


def test_judge_unparsable_answer_raises_by_default_naming_it(judge_server, images):
    # a random model's answer holds no number in [0, 10]
    with pytest.raises(ValueError, match=r"vlm_judge: the answer of http://127\.0\.0\.1:\d+/v1 for image 0 .*"
                       r"does not parse \((no number|.* outside score_range.*)\).*on_unparsable: score"):  # fmt: skip
        _judge(judge_server, images[:1])


def test_judge_in_a_multi_reward_logs_its_mean_and_the_unparsable_fraction(judge_server, images, caplog):
    address = judge_server.address.split("://", 1)[1]
    config = RewardConfig(
        pool="thread",
        num_workers=2,
        reward_functions={
            "jpeg": {"builtin": "jpeg_compressibility", "weight": 1.0},
            "judge": {
                "builtin": "vlm_judge",
                "weight": 2.0,
                "reward_kwargs": {
                    "reward_router_address": address, "max_tokens": 4, "on_unparsable": "score",
                    "unparsable_score": 0.5,
                },
            },
        },
    )  # fmt: skip
    batch = RewardBatch(images, PROMPTS, ["ocr"] * 4, [None] * 4, [{} for _ in range(4)])
    with caplog.at_level(logging.WARNING, logger="verl_omni.reward.vlm_judge"), build_reward_manager(config) as m:
        out = m.score(batch, step=3)
    metrics = out.metrics()
    assert out.terms["judge"] == [0.5] * 4 and metrics["reward/judge/mean"] == 0.5
    assert metrics["reward/judge/judge_unparsable"] == 1.0  # every gibberish answer counted
    assert "answers do not parse and get unparsable_score=0.5" in caplog.text
    from verl_omni.reward.jpeg import jpeg_compressibility

    expected = jpeg_compressibility(images).float() + 2.0 * 0.5
    assert torch.allclose(out.scores, expected)


def test_judge_without_a_router_address_names_the_key(images):
    config = RewardConfig(pool="thread", num_workers=1, reward_functions={"judge": {"builtin": "vlm_judge"}})
    with (
        build_reward_manager(config) as m,
        pytest.raises(RewardFunctionError, match="reward_router_address is not set"),
    ):
        m.score(RewardBatch(images[:1], ["p"], ["x"], [None], [{}]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"score_range": [5, 5]}, r"score_range: expected \[low, high\]", id="range"),
        pytest.param(
            {"prompt_template": "{prompt} {answer}"}, r"prompt_template: unknown placeholder \{answer\}", id="template"
        ),
        pytest.param({"choices": {}}, r"choices: expected a non-empty mapping", id="no-choices"),
        pytest.param({"choices": {"yes": "high"}}, r"choices: 'yes' -> 'high'", id="choice-value"),
        pytest.param({"on_unparsable": "zero"}, r"on_unparsable: expected 'raise' or 'score'", id="mode"),
        pytest.param({"on_unparsable": "score"}, r"unparsable_score: expected a finite number", id="no-fallback"),
        pytest.param({"score_pattern": "[0-9]+"}, r"score_pattern: needs a group", id="pattern"),
    ],
)
def test_judge_options_are_checked_at_start_up_naming_the_key(kwargs, match):
    config = RewardConfig(
        pool="thread", num_workers=1, reward_functions={"judge": {"builtin": "vlm_judge", "reward_kwargs": kwargs}}
    )
    with pytest.raises((TypeError, ValueError), match=r"^reward\.reward_functions\.judge\.reward_kwargs\." + match):
        build_reward_manager(config)


def test_judge_option_typo_is_refused_at_start_up():
    config = RewardConfig(
        pool="thread",
        num_workers=1,
        reward_functions={"judge": {"builtin": "vlm_judge", "reward_kwargs": {"temprature": 0.0}}},
    )
    with pytest.raises(
        TypeError, match=r"^reward\.reward_functions\.judge\.name .*reward_kwargs temprature are passed"
    ):
        build_reward_manager(config)


@pytest.mark.parametrize(
    ("spec", "answer", "expected"),
    [
        pytest.param({}, "7", 0.7, id="bare-number"),
        pytest.param({}, "I would give it 8.5 out of 10.", 0.85, id="number-in-text"),
        pytest.param({"score_range": [1, 5]}, "Score: 1", 0.0, id="low-end"),
        pytest.param({"score_range": [1, 5]}, "5/5", 1.0, id="first-number-wins"),
        pytest.param({"score_pattern": r"Score:\s*(\d+)"}, "Of 10 points. Score: 4", 0.4, id="pattern"),
        pytest.param({"choices": {"yes": 1.0, "no": 0.0}}, "Yes.", 1.0, id="choice-any-case"),
        pytest.param({"choices": {"yes": 1.0, "no": 0.0}}, "No, it is not.", 0.0, id="other-choice"),
        pytest.param({"choices": {"yes": 1.0, "no": 0.0}}, "No — yes would be wrong", 0.0, id="first-choice-wins"),
        pytest.param({"choices": {"good": 1.0, "very good": 2.0}}, "very good", 2.0, id="longer-choice-at-same-place"),
    ],
)
def test_parse_reads_the_score_or_choice(spec, answer, expected):
    value, why = JudgeSpec(**spec).parse(answer)
    assert why == "" and value == pytest.approx(expected)


@pytest.mark.parametrize(
    ("spec", "answer", "why"),
    [
        pytest.param({}, "looks great", "no number", id="no-number"),
        pytest.param({}, "11", "11 is outside score_range [0, 10]", id="out-of-range-not-clipped"),
        pytest.param({}, "-1", "-1 is outside score_range", id="negative"),
        pytest.param({"choices": {"yes": 1.0, "no": 0.0}}, "maybe", "none of the choices", id="no-choice"),
        pytest.param({"choices": {"yes": 1.0}}, "eyes", "none of the choices", id="whole-words-only"),
        pytest.param({"score_pattern": r"Score:\s*(\d+)"}, "7", "no number", id="pattern-missing"),
    ],
)
def test_parse_reports_why_an_answer_does_not_parse(spec, answer, why):
    value, reason = JudgeSpec(**spec).parse(answer)
    assert value is None and why in reason


def test_router_base_url_accepts_host_port_and_urls():
    assert router_base_url("10.0.0.2:8000") == "http://10.0.0.2:8000/v1"
    assert router_base_url("https://judge.example/v1/") == "https://judge.example/v1"
    with pytest.raises(ValueError, match="reward_router_address is not set"):
        router_base_url(None)
