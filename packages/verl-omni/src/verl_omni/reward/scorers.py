"""Scorers: the built-in `data_source` router, a user function, and a weighted sum of functions.

`build_scorer(reward_config)` picks one the way verl-omni does: `reward.reward_functions` (a weighted sum)
when set, else `reward.custom_reward_function` when its `path` is set, else the built-in router.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from verl_omni.reward.batch import RewardBatch, RewardFunctionError, RewardOutput
from verl_omni.reward.builtin import BUILTIN_IMAGE_SCORERS, check_builtin_data_sources
from verl_omni.reward.config import RewardConfig
from verl_omni.reward.loader import LoadedRewardFunction, load_reward_function
from verl_omni.reward.reward_model import REWARD_MODEL_ARGS, RewardModelEndpoint
from verl_omni.reward.video import score_media

__all__ = ["BuiltinScorer", "FunctionScorer", "WeightedSumScorer", "build_scorer"]


class BuiltinScorer:
    """Routes each image by `data_source` to a built-in scorer (`BUILTIN_IMAGE_SCORERS`), one call per source."""

    name = "default_compute_score_image (built-in)"

    def check_data_sources(self, data_sources: Iterable[str | None]) -> None:
        """Raise `ValueError` naming a `data_source` that has no built-in scorer (call it at start-up)."""
        check_builtin_data_sources(data_sources)

    def __call__(self, batch: RewardBatch) -> RewardOutput:
        """Score `batch`; an unknown `data_source` raises `RewardFunctionError` at its first image."""
        scores = torch.empty(len(batch), dtype=torch.float32)
        for ds in dict.fromkeys(batch.data_sources):
            idx = [i for i, d in enumerate(batch.data_sources) if d == ds]
            fn = BUILTIN_IMAGE_SCORERS.get(ds) if isinstance(ds, str) else None
            if fn is None:
                known = ", ".join(BUILTIN_IMAGE_SCORERS)
                raise RewardFunctionError(
                    function=self.name,
                    index=batch.offset + idx[0],
                    data_source=ds,
                    detail=f"no built-in image scorer for this data_source (known: {known}); set "
                    "reward.custom_reward_function.path/.name to score it",
                )
            infos = [batch.extra_infos[i] for i in idx]
            scores[idx] = score_media(fn, batch.images[idx], infos).to(torch.float32)
        return RewardOutput(scores)


class FunctionScorer:
    """Runs a user reward function (per-sample or batched, sync or async) over a batch.

    Each function sees `extra_info` as a copy of the row's mapping with `prompt` added when absent; a
    batched function that declares `prompts` (or `**kwargs`) also gets `prompts=[...]`. With a reward model, a
    function that declares `reward_router_address`, `reward_model_tokenizer` or `model_name` (or `**kwargs`) gets
    them on every call, as verl passes them.

    Args:
        function (`LoadedRewardFunction`): from `load_reward_function`.
        reward_model (`RewardModelEndpoint`, *optional*): the running reward model.
    """

    def __init__(self, function: LoadedRewardFunction, reward_model: RewardModelEndpoint | None = None) -> None:
        self.function = function
        self.name = function.name
        self.reward_model = reward_model
        self._model_kwargs: dict[str, Any] | None = None

    def _call_kwargs(self) -> dict[str, Any]:
        """`reward_kwargs` plus the reward model's arguments the function takes (its tokenizer loaded once)."""
        if self._model_kwargs is None:
            model = self.reward_model
            self._model_kwargs = model.kwargs_for(self.function.fn) if model is not None else {}
        return {**self.function.reward_kwargs, **self._model_kwargs}

    def check_data_sources(self, data_sources: Iterable[str | None]) -> None:
        """Nothing to check up front: a user function decides per call which sources it scores."""

    def __call__(self, batch: RewardBatch) -> RewardOutput:
        """Score `batch`; a raise or an unusable result becomes `RewardFunctionError` (chained)."""
        infos = [
            {**info, "prompt": p} if "prompt" not in info else dict(info)
            for info, p in zip(batch.extra_infos, batch.prompts)
        ]
        if self.function.batched:
            return self._batched(batch, infos)
        calls = [
            dict(
                data_source=batch.data_sources[i],
                solution_image=batch.images[i],
                ground_truth=batch.ground_truths[i],
                extra_info=infos[i],
                **self._call_kwargs(),
            )
            for i in range(len(batch))
        ]
        if self.function.is_async:
            results = _run_coroutine(_gather([self.function.fn(**kw) for kw in calls]))
        else:
            results = []
            for i, kw in enumerate(calls):
                try:
                    results.append(self.function.fn(**kw))
                except Exception as e:
                    raise self._error(batch, i, f"raised {type(e).__name__}: {e}") from e
        values = []
        for i, r in enumerate(results):
            if isinstance(r, BaseException):
                raise self._error(batch, i, f"raised {type(r).__name__}: {r}") from r
            values.append(self._value(batch, i, r))
        return _output(values)

    def _batched(self, batch: RewardBatch, infos: list[dict[str, Any]]) -> RewardOutput:
        kwargs = dict(
            data_sources=list(batch.data_sources),
            solution_images=batch.images,
            ground_truths=list(batch.ground_truths),
            extra_infos=infos,
            **self._call_kwargs(),
        )
        if self.function.accepts_prompts:
            kwargs.setdefault("prompts", list(batch.prompts))
        try:
            result = self.function.fn(**kwargs)
            if self.function.is_async:
                result = _run_coroutine(result)
        except Exception as e:
            raise self._error(
                batch,
                0,
                f"raised {type(e).__name__}: {e} (batched call on samples "
                f"{batch.offset}..{batch.offset + len(batch) - 1})",
            ) from e
        if isinstance(result, dict):
            if "score" not in result:
                raise self._error(batch, 0, f"returned a dict without 'score' (keys: {', '.join(map(str, result))})")
            columns = {k: _as_list(v) for k, v in result.items()}
            bad = [k for k, v in columns.items() if v is None or len(v) != len(batch)]
            if bad:
                raise self._error(batch, 0, f"returned {bad[0]!r} that is not a list of {len(batch)} values")
            result = [{k: columns[k][i] for k in columns} for i in range(len(batch))]
        items = _as_list(result)
        if items is None or len(items) != len(batch):
            got = len(items) if items is not None else type(result).__name__
            raise self._error(batch, 0, f"returned {got} scores for {len(batch)} images")
        return _output([self._value(batch, i, r) for i, r in enumerate(items)])

    def _value(self, batch: RewardBatch, i: int, result: Any) -> tuple[float, dict[str, Any]]:
        extra: dict[str, Any] = {}
        if isinstance(result, dict):
            if "score" not in result:
                raise self._error(batch, i, f"returned a dict without 'score' (keys: {', '.join(map(str, result))})")
            extra = {k: v for k, v in result.items() if k != "score"}
            result = result["score"]
        try:
            if isinstance(result, (str, bytes)) or (isinstance(result, torch.Tensor) and result.numel() != 1):
                raise TypeError
            score = float(result)
        except (TypeError, ValueError):
            raise self._error(batch, i, f"returned {result!r}; expected a number or a dict with a 'score'") from None
        if not math.isfinite(score):
            raise self._error(batch, i, f"returned a non-finite score {score}")
        return score, extra

    def _error(self, batch: RewardBatch, i: int, detail: str) -> RewardFunctionError:
        return RewardFunctionError(
            function=self.name, index=batch.offset + i, data_source=batch.data_sources[i], detail=detail
        )


class WeightedSumScorer:
    """`reward.aggregation: weighted_sum` over `reward.reward_functions`: score = Σ weight · term.

    `RewardOutput.terms[<id>]` holds each term's per-image (unweighted) score, logged as `reward/<id>/mean`;
    a term's own extras are `<id>/<key>`.

    Args:
        terms (`list[tuple[str, float, scorer]]`): `(id, weight, scorer)` per term, in config order.
    """

    def __init__(self, terms: Sequence[tuple[str, float, FunctionScorer]]) -> None:
        self.terms = list(terms)
        self.name = "weighted_sum(" + ", ".join(f"{tid}={w:g}*{s.name}" for tid, w, s in self.terms) + ")"

    def check_data_sources(self, data_sources: Iterable[str | None]) -> None:
        """Nothing to check up front (every term is a user function)."""

    def __call__(self, batch: RewardBatch) -> RewardOutput:
        """Score `batch` with every term and sum them with their weights."""
        total = torch.zeros(len(batch), dtype=torch.float64)
        extra: dict[str, list[Any]] = {}
        terms: dict[str, list[float]] = {}
        for tid, weight, scorer in self.terms:
            out = scorer(batch)
            total += weight * out.scores.to(torch.float64)
            terms[tid] = out.scores.tolist()
            for k, v in out.extra.items():
                extra[f"{tid}/{k}"] = v
        return RewardOutput(total.to(torch.float32), extra, terms)


def build_scorer(
    config: RewardConfig, *, reward_model: RewardModelEndpoint | None = None
) -> BuiltinScorer | FunctionScorer | WeightedSumScorer:
    """The scorer `reward.*` asks for; user functions are imported and their signatures checked here.

    Call it in the driver at start-up so a bad path, a missing function or a wrong signature stops the
    run before training (each Ray reward worker builds its own copy the same way). With
    `reward.reward_model.enable`, functions may require the reward model's arguments (`REWARD_MODEL_ARGS`);
    `reward_model` is where it runs (None while it is not started: building only checks the functions).

    Raises:
        FileNotFoundError, ImportError, AttributeError, TypeError: from `load_reward_function`, naming the
            config key and the file.
    """
    provided = REWARD_MODEL_ARGS if config.reward_model.enable else ()
    if config.reward_functions:
        terms = []
        for tid, term in config.reward_functions.items():
            path, name = term.function
            fn = load_reward_function(
                path,
                name,
                reward_kwargs={**config.reward_kwargs, **term.reward_kwargs},
                key=f"reward.reward_functions.{tid}",
                provided=provided,
            )
            terms.append((tid, term.weight, FunctionScorer(fn, reward_model)))
        return WeightedSumScorer(terms)
    if config.uses_custom_function:
        custom = config.custom_reward_function
        assert custom.path is not None  # uses_custom_function checked it
        fn = load_reward_function(
            custom.path, custom.name, reward_kwargs={**config.reward_kwargs, **custom.reward_kwargs}, provided=provided
        )
        return FunctionScorer(fn, reward_model)
    return BuiltinScorer()


def _as_list(value: Any) -> list[Any] | None:
    if isinstance(value, torch.Tensor):
        return value.reshape(-1).tolist() if value.dim() <= 1 else None
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist() if getattr(value, "ndim", 0) == 1 else None
    if isinstance(value, (list, tuple)):
        return list(value)
    return None


def _output(values: list[tuple[float, dict[str, Any]]]) -> RewardOutput:
    keys = list(dict.fromkeys(k for _, e in values for k in e))
    extra = {k: [e.get(k) for _, e in values] for k in keys}
    return RewardOutput(torch.tensor([s for s, _ in values], dtype=torch.float32), extra)


async def _gather(coros: list[Any]) -> list[Any]:
    return await asyncio.gather(*coros, return_exceptions=True)


def _run_coroutine(coro: Any) -> Any:
    """Run `coro` to completion from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e

    t = threading.Thread(target=target, name="verl-omni-reward-async")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
