"""Built-in `ocr` reward: the reward model transcribes each image; score = 1 − normalised Levenshtein distance.

`compute_score_ocr` keeps the signature of verl's OCR reward (`examples/flowgrpo_trainer/reward_fn.py` before
#6200, `verl_omni.utils.reward_score.genrm_ocr` in verl-omni): an `async` per-sample function called with
`reward_router_address` (`host:port` of the reward model's OpenAI-compatible router, `reward.reward_model.*`), and
optionally the reward model's tokenizer and served model name. It sends the image (a PNG data URL) with a
transcription prompt to `POST /v1/chat/completions`, greedy, and scores the answer with `ocr_similarity`.

Both texts are compared case-insensitively with all whitespace removed (as Flow-GRPO's OCR reward does), and the
distance is normalised by the longer text (`rapidfuzz`'s `Levenshtein.normalized_distance`), so the score is in
[0, 1]: 1 for an exact transcription, 0 when nothing matches; text the model adds beyond the ground truth lowers
it. A failed request raises (naming the router and the status); it is never scored 0.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

import httpx
import numpy as np
import torch
from rapidfuzz.distance import Levenshtein

__all__ = ["OCR_PROMPT", "compute_score_ocr", "image_data_url", "normalize_ocr_text", "ocr_similarity"]

OCR_PROMPT = "Please output only the text content from the image without any additional descriptions or formatting."
"""The question sent with each image (Flow-GRPO's OCR prompt)."""

_WHITESPACE = re.compile(r"\s+")


def normalize_ocr_text(text: str) -> str:
    """Lower-case `text` and remove all whitespace (the form both texts are compared in)."""
    return _WHITESPACE.sub("", text).lower()


def ocr_similarity(transcription: str, ground_truth: str) -> float:
    """`1 − Levenshtein(a, b) / max(len(a), len(b))` of the normalised texts, in [0, 1] (two empty texts: 1).

    Args:
        transcription (`str`): what the reward model read in the image.
        ground_truth (`str`): the text the image should show.

    Raises:
        TypeError: either argument is not a string.
    """
    if not isinstance(transcription, str) or not isinstance(ground_truth, str):
        raise TypeError(
            f"ocr_similarity compares strings, got {type(transcription).__name__} and {type(ground_truth).__name__}"
        )
    a, b = normalize_ocr_text(transcription), normalize_ocr_text(ground_truth)
    return 1.0 - float(Levenshtein.normalized_distance(a, b))


def image_data_url(image: torch.Tensor | np.ndarray | Any) -> str:
    """A `data:image/png;base64,...` URL of a uint8 `(3, H, W)` tensor (float in [0, 1], HWC arrays, PIL accepted)."""
    from PIL import Image

    if not isinstance(image, Image.Image):
        array = image.detach().cpu().numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
        if array.ndim == 3 and array.shape[0] in (1, 3) and array.shape[-1] not in (1, 3):
            array = array.transpose(1, 2, 0)
        if array.dtype != np.uint8:
            array = (np.clip(array.astype(np.float32), 0.0, 1.0) * 255).round().astype(np.uint8)
        image = Image.fromarray(array.squeeze(-1) if array.shape[-1] == 1 else array)
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


async def compute_score_ocr(
    data_source: str,
    solution_image: torch.Tensor | np.ndarray,
    ground_truth: str,
    extra_info: dict[str, Any] | None,
    reward_router_address: str | None,
    reward_model_tokenizer: Any = None,
    model_name: str | None = None,
    *,
    prompt: str = OCR_PROMPT,
    max_tokens: int | None = None,
    timeout_s: float = 120.0,
    **kwargs: Any,
) -> float:
    """Ask the reward model to transcribe `solution_image`; return `ocr_similarity(answer, ground_truth)`.

    Args:
        data_source (`str`): the row's `data_source` (any; the score does not depend on it).
        solution_image: uint8 `(3, H, W)` image.
        ground_truth (`str`): the text the image should show.
        extra_info (`dict`, *optional*): accepted, unused.
        reward_router_address (`str`): `host:port` (or `http://host:port`) of the reward model router.
        reward_model_tokenizer: accepted, unused (the router applies the model's chat template).
        model_name (`str`, *optional*): the served model name sent as the request's `model`.
        prompt (`str`, *optional*): the transcription question (`reward_kwargs.prompt` sets it).
        max_tokens (`int`, *optional*): longest transcription; None = the servers' default
            (`reward.reward_model.rollout.response_length`).
        timeout_s (`float`, *optional*, defaults to `120.0`): longest one request may take.
        **kwargs: accepted, unused (other reward-manager arguments).

    Returns:
        The score in [0, 1].

    Raises:
        ValueError: no reward model (`reward_router_address` is None) or a ground truth that is not a string.
        RuntimeError: the router answered an error status or an answer without text (names the router).
        httpx.HTTPError: the router could not be reached in time.
    """
    if not reward_router_address:
        raise ValueError(
            "the ocr reward needs a reward model: set reward.reward_model.enable=true and "
            "reward.reward_model.model_path (a vision-language model)"
        )
    if not isinstance(ground_truth, str):
        raise ValueError(f"ground_truth: expected the text the image should show, got {ground_truth!r}")
    base = reward_router_address if "://" in reward_router_address else f"http://{reward_router_address}"
    content = [
        {"type": "image_url", "image_url": {"url": image_data_url(solution_image)}},
        {"type": "text", "text": prompt},
    ]
    body: dict[str, Any] = {"messages": [{"role": "user", "content": content}], "temperature": 0.0}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if model_name:
        body["model"] = model_name
    async with httpx.AsyncClient(base_url=base, timeout=timeout_s, trust_env=False) as http:
        response = await http.post("/v1/chat/completions", json=body)
    if response.status_code >= 400:
        raise RuntimeError(
            f"reward model router {reward_router_address} answered {response.status_code}: {response.text[:500]}"
        )
    try:
        text = response.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise RuntimeError(
            f"reward model router {reward_router_address} answered no chat completion: {response.text[:200]}"
        ) from e
    if not isinstance(text, str):
        raise RuntimeError(f"reward model router {reward_router_address} answered a message without text: {text!r}")
    return ocr_similarity(text, ground_truth)
