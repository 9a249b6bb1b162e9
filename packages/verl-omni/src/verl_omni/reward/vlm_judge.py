"""`vlm_judge`: a vision-language model judges each image through an OpenAI-compatible chat endpoint.

For every image the judge renders `prompt_template` with the sample's prompt and ground truth, sends it with the
image (a base64 PNG data URL) to `http://<reward_router_address>/v1/chat/completions` through the `openai`
package's `AsyncOpenAI`, and parses the answer:

- **score** (default): the first number in the answer (or `score_pattern`'s first group), which must lie in
  `score_range = [low, high]`; the reward is `(x - low) / (high - low)`, in [0, 1];
- **choice** (`choices = {"yes": 1.0, "no": 0.0}`): the choice that appears first in the answer (whole word, any
  case); the reward is its value.

An answer that does not parse (no number, a number outside `score_range`, no choice) is never scored 0 in
silence: with `on_unparsable: raise` (default) it stops the step with the answer in the error; with
`on_unparsable: score` the image gets `unparsable_score` (which must be set), a warning is logged with the first
such answer, and the extra `judge_unparsable` (1 per unparsable image, else 0) is logged as
`reward/judge_unparsable` (in a multi-reward, `reward/<id>/judge_unparsable`): the fraction of each step's images.

The trainer's reward model passes `reward_router_address` ("host:port") and `model_name`; against a server of
your own, set them in `reward_kwargs`.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import logging
import math
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from PIL import Image

from verl_omni.reward.loader import batched_reward, checks_reward_kwargs

__all__ = ["DEFAULT_PROMPT_TEMPLATE", "JudgeSpec", "compute_score", "image_data_url", "router_base_url"]

logger = logging.getLogger(__name__)

DEFAULT_PROMPT_TEMPLATE = (
    'This image was generated for the prompt: "{prompt}".\n'
    "Rate how well the image matches the prompt, from {low:g} (not at all) to {high:g} (perfectly). "
    "Answer with the number only."
)
"""The default `prompt_template` (score mode)."""

#: placeholders a `prompt_template` may use
TEMPLATE_FIELDS = ("prompt", "ground_truth", "data_source", "low", "high", "choices")

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"


@dataclasses.dataclass(frozen=True)
class JudgeSpec:
    """How the judge is asked and how its answer is parsed (the `vlm_judge` reward kwargs, checked).

    Args:
        prompt_template (`str`): the user text; placeholders from `TEMPLATE_FIELDS`.
        system_prompt (`str`, *optional*): a system message before the user message.
        score_range (`tuple[float, float]`): `(low, high)` of the score the judge gives (score mode).
        score_pattern (`str`, *optional*): a regex whose first group is the score; defaults to the first number.
        choices (`dict[str, float]`, *optional*): choice -> reward; set = choice mode.
        on_unparsable (`str`): `"raise"` or `"score"`.
        unparsable_score (`float`, *optional*): the reward of an unparsable answer with `on_unparsable: score`.

    Raises:
        ValueError: a bad value, naming the reward kwarg.
    """

    prompt_template: str = DEFAULT_PROMPT_TEMPLATE
    system_prompt: str | None = None
    score_range: tuple[float, float] = (0.0, 10.0)
    score_pattern: str | None = None
    choices: Mapping[str, float] | None = None
    on_unparsable: str = "raise"
    unparsable_score: float | None = None

    def __post_init__(self) -> None:
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(self.prompt_template) if f is not None}
        except ValueError as e:
            raise ValueError(f"prompt_template: not a valid format string: {e}") from e
        unknown = sorted(f for f in fields if f.split(".")[0].split("[")[0] not in TEMPLATE_FIELDS)
        if unknown:
            raise ValueError(f"prompt_template: unknown placeholder {{{unknown[0]}}}; allowed: {TEMPLATE_FIELDS}")
        lo_hi = tuple(self.score_range)
        if len(lo_hi) != 2 or not all(_finite(v) for v in lo_hi) or not lo_hi[0] < lo_hi[1]:
            raise ValueError(f"score_range: expected [low, high] with finite low < high, got {list(self.score_range)}")
        object.__setattr__(self, "score_range", (float(lo_hi[0]), float(lo_hi[1])))
        if self.score_pattern is not None:
            try:
                groups = re.compile(self.score_pattern).groups
            except re.error as e:
                raise ValueError(f"score_pattern: not a valid regex: {e}") from e
            if groups < 1:
                raise ValueError(f"score_pattern: needs a group around the number, got {self.score_pattern!r}")
        if self.choices is not None:
            if not isinstance(self.choices, Mapping) or not self.choices:
                raise ValueError(f"choices: expected a non-empty mapping choice -> reward, got {self.choices!r}")
            bad = [k for k, v in self.choices.items() if not isinstance(k, str) or not k.strip() or not _finite(v)]
            if bad:
                raise ValueError(f"choices: {bad[0]!r} -> {self.choices[bad[0]]!r}: expected a word -> a finite number")
            if self.score_pattern is not None:
                raise ValueError("score_pattern: unused with choices (choice mode); drop one of them")
        if self.on_unparsable not in ("raise", "score"):
            raise ValueError(f"on_unparsable: expected 'raise' or 'score', got {self.on_unparsable!r}")
        if self.on_unparsable == "score" and not _finite(self.unparsable_score):
            raise ValueError(
                f"unparsable_score: expected a finite number with on_unparsable: score, got {self.unparsable_score!r}"
            )
        if self.on_unparsable == "raise" and self.unparsable_score is not None:
            raise ValueError("unparsable_score: only used with on_unparsable: score (set that, or drop it)")

    def render(self, prompt: str, ground_truth: Any, data_source: Any) -> str:
        """The user text for one sample."""
        low, high = self.score_range
        choices = " / ".join(self.choices) if self.choices else ""
        fields = dict(prompt=prompt, ground_truth=ground_truth, data_source=data_source, low=low, high=high)
        return self.prompt_template.format(**fields, choices=choices)

    def parse(self, answer: str) -> tuple[float | None, str]:
        """`(reward, "")` for a parsable answer, else `(None, why)`; the reward is in [0, 1] in score mode."""
        if self.choices is not None:
            found = []
            for choice, value in self.choices.items():
                m = re.search(rf"(?<!\w){re.escape(choice.strip())}(?!\w)", answer, flags=re.IGNORECASE)
                if m:
                    found.append((m.start(), -len(choice), float(value)))
            if not found:
                return None, f"none of the choices {list(self.choices)}"
            return min(found)[2], ""
        if self.score_pattern is not None:
            m = re.search(self.score_pattern, answer)
            text = m.group(1) if m else None
        else:
            m = re.search(_NUMBER, answer)
            text = m.group(0) if m else None
        try:
            value = float(text) if text is not None else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            return None, "no number" if text is None else f"{text!r} is not a number"
        low, high = self.score_range
        if not low <= value <= high:
            return None, f"{value:g} is outside score_range [{low:g}, {high:g}]"
        return (value - low) / (high - low), ""


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


@checks_reward_kwargs
def check_reward_kwargs(reward_kwargs: Mapping[str, Any]) -> None:
    """Check the parse and template options at start-up (raises `ValueError` naming the kwarg).

    Unknown keys are refused by the loader's signature check (`compute_score` takes no `**kwargs`).
    """
    names = {f.name for f in dataclasses.fields(JudgeSpec)}
    JudgeSpec(**{k: v for k, v in reward_kwargs.items() if k in names})


def image_data_url(image: torch.Tensor) -> str:
    """A `data:image/png;base64,...` URL of a uint8 `(3, H, W)` image."""
    buffer = io.BytesIO()
    Image.fromarray(image.detach().cpu().permute(1, 2, 0).numpy()).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def router_base_url(address: str | None) -> str:
    """`http://host:port/v1` from `reward_router_address` ("host:port", or a URL with or without `/v1`).

    Raises:
        ValueError: no address (says where it comes from).
    """
    if not address:
        raise ValueError(
            "reward_router_address is not set: enable reward.reward_model (the trainer passes its router's "
            "address) or set reward_kwargs.reward_router_address to the host:port of an OpenAI-compatible server"
        )
    url = address if "://" in address else f"http://{address}"
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


@batched_reward
async def compute_score(
    data_sources: Sequence[Any],
    solution_images: torch.Tensor,
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any]],
    prompts: Sequence[str] | None = None,
    *,
    reward_router_address: str | None = None,
    model_name: str | None = None,
    max_tokens: int = 64,
    temperature: float = 0.0,
    seed: int | None = None,
    timeout_s: float = 120.0,
    max_retries: int = 2,
    max_concurrency: int = 16,
    api_key: str = "EMPTY",
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
    system_prompt: str | None = None,
    score_range: Sequence[float] = (0.0, 10.0),
    score_pattern: str | None = None,
    choices: Mapping[str, float] | None = None,
    on_unparsable: str = "raise",
    unparsable_score: float | None = None,
) -> dict[str, list[Any]]:
    """Judge a chunk of images (batched reward function, `builtin: vlm_judge`).

    Args:
        data_sources (`list`): each image's `data_source` (a template field).
        solution_images (`torch.Tensor`): uint8 `(B, 3, H, W)`.
        ground_truths (`list`): each image's ground truth (a template field).
        extra_infos (`list[dict]`): each row's `extra_info`; its `prompt` is used when `prompts` is not given.
        prompts (`list[str]`, *optional*): each image's prompt (a template field).
        reward_router_address (`str`): "host:port" of an OpenAI-compatible server (passed by the trainer's
            reward model).
        model_name (`str`, *optional*): the served model name; defaults to `"default"`.
        max_tokens (`int`, *optional*, defaults to `64`): the answer's token limit.
        temperature (`float`, *optional*, defaults to `0.0`): sampling temperature (0 = greedy).
        seed (`int`, *optional*): sampling seed.
        timeout_s (`float`): per-request timeout.
        max_retries (`int`, *optional*, defaults to `2`): the `openai` client's retries (with its backoff) on
            connection errors, 429 and 5xx.
        max_concurrency (`int`): requests in flight at once.
        api_key (`str`): sent as a bearer token.
        prompt_template (`str`): the user text (see `JudgeSpec`).
        system_prompt (`str`, *optional*): a system message.
        score_range (`[low, high]`): the judge's scale (score mode).
        score_pattern (`str`, *optional*): regex whose first group is the score.
        choices (`dict[str, float]`, *optional*): choice -> reward (choice mode).
        on_unparsable (`str`): `"raise"` or `"score"`.
        unparsable_score (`float`, *optional*): the reward of an unparsable answer with `on_unparsable: score`.

    Returns:
        `{"score": [...], "judge_unparsable": [0/1, ...], "judge_answer": [...]}`.

    Raises:
        ValueError: an unparsable answer with `on_unparsable: raise` (names the image and quotes the answer), a
            bad option (`JudgeSpec`), or no `reward_router_address`.
        openai.APIError: the server failed after the client's retries.
    """
    import httpx
    import openai

    spec = JudgeSpec(
        prompt_template=prompt_template,
        system_prompt=system_prompt,
        score_range=tuple(score_range),
        score_pattern=score_pattern,
        choices=choices,
        on_unparsable=on_unparsable,
        unparsable_score=unparsable_score,
    )
    base_url = router_base_url(reward_router_address)
    n = solution_images.shape[0]
    texts = [
        spec.render(
            prompts[i] if prompts is not None else extra_infos[i].get("prompt", ""), ground_truths[i], data_sources[i]
        )
        for i in range(n)
    ]
    gate = asyncio.Semaphore(max(1, int(max_concurrency)))
    http = httpx.AsyncClient(trust_env=False, timeout=timeout_s)
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries, http_client=http
    )

    async def ask(i: int) -> str:
        messages: list[dict[str, Any]] = (
            [{"role": "system", "content": spec.system_prompt}] if spec.system_prompt else []
        )
        url = await asyncio.to_thread(image_data_url, solution_images[i])
        content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": texts[i]}]
        messages.append({"role": "user", "content": content})
        async with gate:
            reply = await client.chat.completions.create(
                model=model_name or "default",
                messages=messages,
                max_tokens=max_tokens,
                temperature=temperature,
                **({"seed": seed} if seed is not None else {}),
            )
        return reply.choices[0].message.content or ""

    async with client:
        answers = await asyncio.gather(*(ask(i) for i in range(n)))
    return _scores(spec, answers, base_url)


def _scores(spec: JudgeSpec, answers: Sequence[str], where: str) -> dict[str, list[Any]]:
    scores, flags, bad = [], [], []
    for i, answer in enumerate(answers):
        value, why = spec.parse(answer)
        if value is None:
            if spec.on_unparsable == "raise":
                raise ValueError(
                    f"vlm_judge: the answer of {where} for image {i} of this chunk does not parse ({why}): "
                    f"{answer[:200]!r}; fix prompt_template / choices / score_range, or set on_unparsable: score "
                    "with an unparsable_score"
                )
            bad.append((i, why, answer))
            value = float(spec.unparsable_score)  # type: ignore[arg-type]  # JudgeSpec checked it
        scores.append(value)
        flags.append(0 if not bad or bad[-1][0] != i else 1)
    if bad:
        i, why, answer = bad[0]
        logger.warning(
            "vlm_judge: %d of %d answers do not parse and get unparsable_score=%g; first (image %d, %s): %r",
            len(bad), len(answers), spec.unparsable_score, i, why, answer[:200],
        )  # fmt: skip
    return {"score": scores, "judge_unparsable": flags, "judge_answer": list(answers)}
