"""`http`: score images with a reward service the user runs, over HTTP (JSON in, JSON out).

Each chunk of images is sent in requests of at most `batch_size` images (`max_concurrency` in flight):

    POST <url>    Content-Type: application/json
    {"images":       ["<base64 PNG>", ...],     # one per image, RGB, the generated size
     "prompts":      ["...", ...],
     "ground_truths": [..., ...],               # JSON values (null where the row has none)
     "data_sources": ["...", ...],
     "extra_infos":  [{...}, ...]}              # each row's extra_info (non-JSON values as strings)

    200 OK
    {"scores": [0.7, ...],                      # one finite number per image, in request order
     "extra":  {"key": [..., ...]}}             # optional: per-image values, logged as reward/<key>

A request that fails with a connection error, a timeout (`timeout_s`, the whole request), HTTP 429 or 5xx is
retried with exponential backoff (tenacity: `backoff_s`, doubling, at most `backoff_max_s`) up to `max_attempts`
attempts in all; other 4xx answers and malformed bodies are not retried. When it still fails, the step stops with
`RewardServiceError` naming the URL, the status (or the timeout) and the attempts: a failed request is never
scored 0.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from PIL import Image

from verl_omni.reward.loader import batched_reward, checks_reward_kwargs

__all__ = ["RewardServiceError", "RewardServiceTimeout", "compute_score", "encode_png"]

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class RewardServiceError(RuntimeError):
    """The reward service failed (after retries where the failure may pass). Attributes `url`, `status`, `attempts`."""

    def __init__(self, url: str, detail: str, *, status: int | None = None, attempts: int = 1) -> None:
        self.url, self.status, self.attempts = url, status, attempts
        tries = f" after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
        code = f"HTTP {status}" if status is not None else "failed"
        super().__init__(f"reward service {url}: {code}{tries}: {detail}")


class RewardServiceTimeout(RewardServiceError, TimeoutError):
    """The reward service did not answer within `timeout_s` (on every attempt)."""


class _Retryable(Exception):
    """One failed attempt that may pass on a retry (wraps what to report if it never does)."""

    def __init__(self, status: int | None, detail: str, timeout: bool = False) -> None:
        super().__init__(detail)
        self.status, self.detail, self.timeout = status, detail, timeout


def encode_png(image: torch.Tensor) -> str:
    """Base64 (no `data:` prefix) of a uint8 `(3, H, W)` image saved as PNG."""
    buffer = io.BytesIO()
    Image.fromarray(image.detach().cpu().permute(1, 2, 0).numpy()).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor) or type(value).__module__ == "numpy":
        return value.tolist()
    return str(value)


_OPTIONS = {
    "url": None,
    "batch_size": 16,
    "timeout_s": 60.0,
    "max_attempts": 3,
    "backoff_s": 1.0,
    "backoff_max_s": 30.0,
    "max_concurrency": 4,
    "headers": None,
}


@checks_reward_kwargs
def check_reward_kwargs(reward_kwargs: Mapping[str, Any]) -> None:
    """Check the options at start-up: `url` set, counts >= 1, times > 0 (raises `ValueError` naming the kwarg)."""
    url = reward_kwargs.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ValueError(f"url: expected the http(s):// URL of your reward service, got {url!r}")
    for key in ("batch_size", "max_attempts", "max_concurrency"):
        v = reward_kwargs.get(key, _OPTIONS[key])
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{key}: expected an int >= 1, got {v!r}")
    for key in ("timeout_s", "backoff_s", "backoff_max_s"):
        v = reward_kwargs.get(key, _OPTIONS[key])
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not (v > 0 and math.isfinite(v)):
            raise ValueError(f"{key}: expected a number of seconds > 0, got {v!r}")
    headers = reward_kwargs.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise ValueError(f"headers: expected a mapping of header -> value, got {headers!r}")


@batched_reward
async def compute_score(
    data_sources: Sequence[Any],
    solution_images: torch.Tensor,
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Mapping[str, Any]],
    prompts: Sequence[str] | None = None,
    *,
    url: str | None = None,
    batch_size: int = 16,
    timeout_s: float = 60.0,
    max_attempts: int = 3,
    backoff_s: float = 1.0,
    backoff_max_s: float = 30.0,
    max_concurrency: int = 4,
    headers: Mapping[str, str] | None = None,
) -> dict[str, list[Any]]:
    """Score a chunk with the reward service at `url` (batched reward function, `builtin: http`).

    Args:
        data_sources (`list`): each image's `data_source`.
        solution_images (`torch.Tensor`): uint8 `(B, 3, H, W)`.
        ground_truths (`list`): each image's ground truth.
        extra_infos (`list[dict]`): each row's `extra_info`; its `prompt` is sent when `prompts` is not given.
        prompts (`list[str]`, *optional*): each image's prompt.
        url (`str`): the service's endpoint, `http(s)://host:port/path`.
        batch_size (`int`): images per request.
        timeout_s (`float`): the limit of one request (connect to last byte).
        max_attempts (`int`): attempts per request, the first included.
        backoff_s (`float`): the first wait between attempts; it doubles after each.
        backoff_max_s (`float`): the longest wait between attempts.
        max_concurrency (`int`): requests in flight at once.
        headers (`dict`, *optional*): extra HTTP headers (e.g. authorization).

    Returns:
        `{"score": [...], <extra key>: [...], ...}`, one value per image.

    Raises:
        RewardServiceTimeout: no answer within `timeout_s` on the last attempt (names the URL).
        RewardServiceError: HTTP 429 / 5xx / connection errors after `max_attempts`, another HTTP error at once,
            or a malformed answer (names the URL and the status).
    """
    import httpx
    import tenacity

    check_reward_kwargs({"url": url, "batch_size": batch_size, "timeout_s": timeout_s, "max_attempts": max_attempts,
                         "backoff_s": backoff_s, "backoff_max_s": backoff_max_s, "max_concurrency": max_concurrency,
                         "headers": headers})  # fmt: skip
    assert url is not None  # checked above
    n = solution_images.shape[0]
    gate = asyncio.Semaphore(max_concurrency)

    async def post(client: httpx.AsyncClient, start: int, stop: int) -> dict[str, Any]:
        images = await asyncio.to_thread(lambda: [encode_png(solution_images[i]) for i in range(start, stop)])
        body = {
            "images": images,
            "prompts": [
                prompts[i] if prompts is not None else extra_infos[i].get("prompt") for i in range(start, stop)
            ],
            "ground_truths": list(ground_truths[start:stop]),
            "data_sources": list(data_sources[start:stop]),
            "extra_infos": [dict(e) for e in extra_infos[start:stop]],
        }
        payload = json.dumps(body, default=_jsonable).encode()
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(max_attempts),
            wait=tenacity.wait_exponential(multiplier=backoff_s, max=backoff_max_s),
            retry=tenacity.retry_if_exception_type(_Retryable),
            reraise=True,
        )
        attempts = 0
        try:
            async with gate:
                async for attempt in retrying:
                    with attempt:
                        attempts += 1
                        return await _attempt(client, url, payload, headers, timeout_s, stop - start)
        except _Retryable as e:
            cls = RewardServiceTimeout if e.timeout else RewardServiceError
            raise cls(url, e.detail, status=e.status, attempts=attempts) from e.__cause__
        raise AssertionError("unreachable: tenacity re-raises the last failure")  # pragma: no cover

    bounds = [(a, min(a + batch_size, n)) for a in range(0, n, batch_size)]
    async with httpx.AsyncClient(trust_env=False) as client:
        answers = await asyncio.gather(*(post(client, a, b) for a, b in bounds))
    out: dict[str, list[Any]] = {"score": [s for a in answers for s in a["scores"]]}
    keys = list(dict.fromkeys(k for a in answers for k in a.get("extra", {})))
    for k in keys:
        out[k] = [v for a, (lo, hi) in zip(answers, bounds) for v in a.get("extra", {}).get(k, [None] * (hi - lo))]
    return out


async def _attempt(
    client: Any, url: str, payload: bytes, headers: Mapping[str, str] | None, timeout_s: float, n: int
) -> dict[str, Any]:
    import httpx

    send = {"Content-Type": "application/json", **dict(headers or {})}
    try:
        response = await asyncio.wait_for(client.post(url, content=payload, headers=send, timeout=timeout_s), timeout_s)
    except (asyncio.TimeoutError, httpx.TimeoutException) as e:
        raise _Retryable(None, f"no answer within {timeout_s:g} s (timeout_s)", timeout=True) from e
    except httpx.TransportError as e:
        raise _Retryable(None, f"{type(e).__name__}: {e}") from e
    if response.status_code in _RETRY_STATUS:
        raise _Retryable(response.status_code, response.text[:300])
    if response.status_code != 200:
        raise RewardServiceError(url, response.text[:300], status=response.status_code, attempts=0)
    try:
        answer = response.json()
    except ValueError as e:
        raise RewardServiceError(url, f"the answer is not JSON: {response.text[:200]!r}", status=200) from e
    scores = answer.get("scores") if isinstance(answer, dict) else None
    if not isinstance(scores, list) or len(scores) != n:
        got = f"{len(scores)} scores" if isinstance(scores, list) else repr(answer)[:200]
        raise RewardServiceError(url, f"expected {{'scores': [{n} numbers]}}, got {got}", status=200)
    bad = [s for s in scores if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s)]
    if bad:
        raise RewardServiceError(url, f"scores must be finite numbers, got {bad[0]!r}", status=200)
    extra = answer.get("extra", {})
    if not isinstance(extra, dict) or any(not isinstance(v, list) or len(v) != n for v in extra.values()):
        raise RewardServiceError(
            url, f"'extra' must map keys to lists of {n} values, got {str(extra)[:200]}", status=200
        )
    return answer
