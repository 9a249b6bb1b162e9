"""`VisualRewardManager` (reward manager `visual`): scores a step's images in chunks on a worker pool.

The manager splits the batch into `min(reward.num_workers, B)` contiguous chunks, scores them on its pool
(threads or Ray actors) and joins the results in order, so the scores of a batch do not depend on the pool
kind or the number of workers. A reward function that raises (or returns a non-number / non-finite value)
stops the step with `RewardFunctionError` naming the step, the sample index, its `data_source` and the
function, chained to the original exception; no sample is ever scored as a silent 0.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import torch

from verl_core.registry import Registry
from verl_omni.reward.batch import RewardBatch, RewardFunctionError, RewardOutput
from verl_omni.reward.config import RewardConfig
from verl_omni.reward.pool import RayRewardPool, RewardPool, ThreadRewardPool
from verl_omni.reward.reward_model import RewardModelEndpoint
from verl_omni.reward.scorers import build_scorer

__all__ = [
    "REWARD_MANAGERS",
    "VisualRewardManager",
    "build_reward_manager",
    "get_reward_manager_class",
    "register_reward_manager",
    "unknown_reward_manager",
]

C = TypeVar("C", bound=type)

REWARD_MANAGERS: Registry[type] = Registry(
    "reward manager",
    key="reward.reward_manager.name",
    notes={
        "naive": "verl's `naive` manager scores text responses; diffusion runs use `visual`",
        "batch": "verl's `batch` manager scores text responses; diffusion runs use `visual` with a batched function",
        "prime": "verl's `prime` manager scores text responses; diffusion runs use `visual`",
        "dapo": "verl's `dapo` manager scores text responses; diffusion runs use `visual`",
    },
)
"""Reward manager name -> class (`reward.reward_manager.name`)."""


def register_reward_manager(*names: str) -> Callable[[C], C]:
    """Class decorator: register a reward manager under each of `names`.

    Raises:
        ValueError: a name is already registered to another class.
    """
    return REWARD_MANAGERS.register(*names)


def get_reward_manager_class(name: str) -> type:
    """The class registered as `name`.

    Raises:
        KeyError: unknown name (the message names `reward.reward_manager.name` and the known names).
    """
    return REWARD_MANAGERS.get(name)


def unknown_reward_manager(name: str) -> str:
    """Why `name` is not a reward manager here, and the known names (the message of the unknown-name errors)."""
    return REWARD_MANAGERS.unknown_text(name)


@register_reward_manager("visual", "VisualRewardManager", "MultiVisualRewardManager")
class VisualRewardManager:
    """Scores generated images with the scorer `reward.*` selects, chunk by chunk on a pool of workers.

    Args:
        config (`RewardConfig`): the `reward.*` subtree.
        pool (`RewardPool`, *optional*): the workers; by default a `ThreadRewardPool` (`reward.pool: thread`)
            or a `RayRewardPool` of `reward.num_workers` actors (`reward.pool: ray`, needs `ray.init()`).
        actor_options (`dict`, *optional*): extra Ray `.options(...)` for the reward actors.
        reward_model (`RewardModelEndpoint`, *optional*): the running reward model (`reward.reward_model.enable`);
            its address, tokenizer and model name reach the functions that take them.

    Building the manager imports and checks the reward function(s) in this process first, so a bad
    `reward.custom_reward_function.path`, a missing function or a wrong signature fails at start-up.

    Raises:
        FileNotFoundError, ImportError, AttributeError, TypeError: a bad reward function (names the key
            and the file).
    """

    name = "visual"

    def __init__(
        self,
        config: RewardConfig,
        *,
        pool: RewardPool | None = None,
        actor_options: dict[str, Any] | None = None,
        reward_model: RewardModelEndpoint | None = None,
    ) -> None:
        self.config = config
        self.scorer = build_scorer(config, reward_model=reward_model)
        if pool is None:
            if config.pool == "thread":
                pool = ThreadRewardPool(self.scorer, config.num_workers)
            else:
                pool = RayRewardPool(config, actor_options=actor_options, reward_model=reward_model)
        self.pool = pool

    def check_data_sources(self, data_sources: Iterable[str | None]) -> None:
        """Fail at start-up when the built-in scorer cannot score a dataset's `data_source` values.

        Raises:
            ValueError: names the `data_source` and the known ones (only with the built-in scorer; user
                functions decide per call).
        """
        self.scorer.check_data_sources(data_sources)

    def score(self, batch: RewardBatch, *, step: int | None = None) -> RewardOutput:
        """Score every image of `batch`.

        Args:
            batch (`RewardBatch`): images uint8 `(B, 3, H, W)` with their prompt rows.
            step (`int`, *optional*): the training step, named in errors.

        Returns:
            `RewardOutput`: float32 `(B,)` scores in batch order and per-image extras.

        Raises:
            RewardFunctionError: a reward function failed (step, sample index, data_source; chained).
            TimeoutError: a worker did not answer within `reward.timeout_s` (names it).
            RewardWorkerError: a Ray worker died (names it).
        """
        n = len(batch)
        if n == 0:
            return RewardOutput(torch.zeros(0, dtype=torch.float32))
        parts = min(self.pool.num_workers, n)
        size, rest = divmod(n, parts)
        bounds, start = [], 0
        for i in range(parts):
            stop = start + size + (1 if i < rest else 0)
            bounds.append((start, stop))
            start = stop
        chunks = [batch.chunk(a, b) for a, b in bounds]
        try:
            outputs = self.pool.score_chunks(chunks, timeout_s=self.config.timeout_s)
        except RewardFunctionError as e:
            raise e.at_step(step) from e.__cause__
        out = RewardOutput.concat(outputs)
        if out.scores.shape != (n,):  # a pool returning the wrong count is a bug, never padded
            raise RuntimeError(f"reward pool returned {tuple(out.scores.shape)} scores for {n} images")
        return out

    def score_records(self, images: torch.Tensor, records: Sequence[Any], *, step: int | None = None) -> RewardOutput:
        """`score` of uint8 `(B, 3, H, W)` images with one prompt row per image (`RewardBatch.from_records`).

        For groups of `n`, pass `[records[i] for i in prompt_index]` (each row once per image).
        """
        return self.score(RewardBatch.from_records(images, records), step=step)

    async def score_async(self, batch: RewardBatch, *, step: int | None = None) -> RewardOutput:
        """`score` from async code (runs in a thread; the event loop stays free)."""
        return await asyncio.to_thread(self.score, batch, step=step)

    def close(self) -> None:
        """Stop the pool's workers."""
        self.pool.close()

    def __enter__(self) -> VisualRewardManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_reward_manager(
    config: RewardConfig,
    *,
    pool: RewardPool | None = None,
    actor_options: dict[str, Any] | None = None,
    reward_model: RewardModelEndpoint | None = None,
) -> VisualRewardManager:
    """The reward manager `reward.reward_manager.name` names, built from `config`.

    Raises:
        KeyError: an unknown manager name.
    """
    cls = get_reward_manager_class(config.reward_manager.name)
    return cls(config, pool=pool, actor_options=actor_options, reward_model=reward_model)
