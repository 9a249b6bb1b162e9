"""`PromptSampler`: a seeded, resumable order of prompt rows, one batch of prompts per training step.

Epoch `e` visits the rows in `numpy.random.default_rng([seed, e]).permutation(n)` order (or in file order
when shuffling is off) and yields `n // batch_size` full batches; the last partial batch of an epoch is
dropped (verl's `drop_last=True`) and the next epoch reshuffles. The state is two integers (epoch and
batches taken in it), so "3 steps straight" and "2 steps, `state_dict()`, a new sampler,
`load_state_dict()`, 1 step" give the same rows, across epoch boundaries too (torchdata's `StatefulDataLoader`
does not keep the next epoch's order after a mid-epoch resume: docs/omni/data.md says why it is not used).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = ["PromptSampler", "iter_batches"]

T = TypeVar("T")

_STATE_KEYS = ("epoch", "batches_in_epoch", "seed", "dataset_size", "batch_size", "shuffle")


def _order(n: int, *, seed: int, epoch: int, shuffle: bool) -> np.ndarray:
    if not shuffle:
        return np.arange(n)
    return np.random.default_rng([seed, epoch]).permutation(n)


class PromptSampler(Generic[T]):
    """Draws batches of rows from a dataset in a seeded order that survives a restart.

    Args:
        dataset (`Sequence`): the rows (a `PromptDataset`; any sequence works).
        batch_size (`int`): rows per batch (`data.train_batch_size`).
        shuffle (`bool`, defaults to `True`): reshuffle every epoch; off = file order every epoch.
        seed (`int`, defaults to 1): seed of the order (`data.seed`).

    Raises:
        ValueError: `batch_size` < 1 or larger than the dataset (names `data.train_batch_size`).

    Groups are formed by the caller: each row is one prompt; the trainer repeats it `rollout.n` times.
    """

    def __init__(self, dataset: Sequence[T], batch_size: int, *, shuffle: bool = True, seed: int = 1) -> None:
        if batch_size < 1:
            raise ValueError(f"data.train_batch_size: expected an int >= 1, got {batch_size}")
        if batch_size > len(dataset):
            raise ValueError(
                f"data.train_batch_size: {batch_size} prompts per step but the training set has only "
                f"{len(dataset)} rows; lower data.train_batch_size or add prompts"
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self._epoch = 0
        self._batches_in_epoch = 0
        self._order: np.ndarray | None = None

    @property
    def steps_per_epoch(self) -> int:
        """Full batches per epoch (`len(dataset) // batch_size`)."""
        return len(self.dataset) // self.batch_size

    @property
    def epoch(self) -> int:
        """The epoch the next batch comes from (0-based)."""
        return self._epoch + (1 if self._batches_in_epoch == self.steps_per_epoch else 0)

    def next_indices(self) -> list[int]:
        """Dataset indices of the next batch (advances the state)."""
        if self._batches_in_epoch == self.steps_per_epoch:
            self._epoch += 1
            self._batches_in_epoch = 0
            self._order = None
        if self._order is None:
            self._order = _order(len(self.dataset), seed=self.seed, epoch=self._epoch, shuffle=self.shuffle)
        start = self._batches_in_epoch * self.batch_size
        self._batches_in_epoch += 1
        return [int(i) for i in self._order[start : start + self.batch_size]]

    def next_batch(self) -> list[T]:
        """The next batch of rows (advances the state)."""
        return [self.dataset[i] for i in self.next_indices()]

    def __iter__(self) -> Iterator[list[T]]:
        """Batches forever, epoch after epoch (the caller stops after its step budget)."""
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict[str, Any]:
        """The position (`epoch`, `batches_in_epoch`) plus what must match on resume (seed, sizes, shuffle)."""
        return {
            "epoch": self._epoch,
            "batches_in_epoch": self._batches_in_epoch,
            "seed": self.seed,
            "dataset_size": len(self.dataset),
            "batch_size": self.batch_size,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from `state` (from `state_dict()`).

        Raises:
            KeyError: a key is missing from `state`.
            ValueError: the state was saved with another seed, dataset size, batch size or shuffle setting
                (names the key: resuming then would not continue the saved order).
        """
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:
            raise KeyError(f"sampler state lacks {', '.join(missing)}; expected keys: {', '.join(_STATE_KEYS)}")
        now = {"seed": self.seed, "dataset_size": len(self.dataset), "batch_size": self.batch_size}
        now["shuffle"] = self.shuffle
        config_key = {
            "seed": "data.seed",
            "dataset_size": "data.train_files / data.train_max_samples",
            "batch_size": "data.train_batch_size",
            "shuffle": "data.shuffle",
        }
        for k, v in now.items():
            if state[k] != v:
                raise ValueError(
                    f"sampler state: saved with {k}={state[k]!r} but this run has {v!r} ({config_key[k]}); "
                    "resuming would not continue the saved prompt order"
                )
        epoch, taken = int(state["epoch"]), int(state["batches_in_epoch"])
        if epoch < 0 or not 0 <= taken <= self.steps_per_epoch:
            raise ValueError(f"sampler state: epoch={epoch}, batches_in_epoch={taken} is out of range")
        self._epoch, self._batches_in_epoch, self._order = epoch, taken, None


def iter_batches(
    dataset: Sequence[T], batch_size: int | None, *, shuffle: bool = False, seed: int = 1
) -> Iterator[list[T]]:
    """One pass over `dataset` in batches (validation): the last batch may be smaller.

    Args:
        dataset (`Sequence`): the rows.
        batch_size (`int`, *optional*): rows per batch (`data.val_batch_size`); None = one batch of all rows.
        shuffle (`bool`): visit the rows in a seeded shuffled order (`data.validation_shuffle`), the same
            order on every call.
        seed (`int`): seed of that order.
    """
    order = _order(len(dataset), seed=seed, epoch=0, shuffle=shuffle)
    size = batch_size or max(len(dataset), 1)
    for start in range(0, len(dataset), size):
        yield [dataset[int(i)] for i in order[start : start + size]]
