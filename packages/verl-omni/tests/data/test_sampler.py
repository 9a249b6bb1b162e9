"""`PromptSampler`: seeded epoch-wise order, exact resume from `state_dict`, bad states; `iter_batches`."""

from __future__ import annotations

import json

import pytest

from verl_omni.data import PromptSampler, iter_batches

ROWS = [f"p{i}" for i in range(10)]


def _take(sampler, steps):
    return [sampler.next_batch() for _ in range(steps)]


def test_same_seed_same_order_other_seed_other_order():
    a, b, c = (PromptSampler(ROWS, 3, seed=s) for s in (7, 7, 8))
    assert _take(a, 9) == _take(b, 9)
    assert _take(PromptSampler(ROWS, 3, seed=7), 9) != _take(c, 9)


def test_each_epoch_is_a_fresh_permutation_and_drops_the_partial_batch():
    s = PromptSampler(ROWS, 3, seed=0)
    assert s.steps_per_epoch == 3
    epochs = [[r for batch in _take(s, 3) for r in batch] for _ in range(3)]
    for rows in epochs:
        assert len(rows) == 9 and len(set(rows)) == 9  # no repeats inside an epoch; one row left out
    assert epochs[0] != epochs[1] != epochs[2]
    assert s.epoch == 3


def test_no_shuffle_is_file_order_every_epoch():
    s = PromptSampler(ROWS, 4, shuffle=False)
    assert _take(s, 4) == [ROWS[0:4], ROWS[4:8], ROWS[0:4], ROWS[4:8]]


@pytest.mark.parametrize("stop_after", [1, 2, 3, 4])  # 3 = exactly at an epoch boundary
def test_resume_continues_exactly(stop_after):
    straight = _take(PromptSampler(ROWS, 3, seed=5), 6)
    first = PromptSampler(ROWS, 3, seed=5)
    head = _take(first, stop_after)
    state = json.loads(json.dumps(first.state_dict()))  # checkpoints store it as JSON
    resumed = PromptSampler(ROWS, 3, seed=5)
    resumed.load_state_dict(state)
    assert head + _take(resumed, 6 - stop_after) == straight


def test_load_state_dict_rejects_another_run():
    s = PromptSampler(ROWS, 3, seed=5)
    s.next_batch()
    state = s.state_dict()
    with pytest.raises(ValueError, match=r"saved with seed=5 but this run has 6 \(data\.seed\)"):
        PromptSampler(ROWS, 3, seed=6).load_state_dict(state)
    with pytest.raises(ValueError, match=r"batch_size=3 but this run has 2 \(data\.train_batch_size\)"):
        PromptSampler(ROWS, 2, seed=5).load_state_dict(state)
    with pytest.raises(KeyError, match="sampler state lacks epoch"):
        PromptSampler(ROWS, 3, seed=5).load_state_dict({k: v for k, v in state.items() if k != "epoch"})


def test_batch_larger_than_dataset_names_the_key():
    with pytest.raises(
        ValueError, match=r"data\.train_batch_size: 11 prompts per step but the training set has only 10"
    ):
        PromptSampler(ROWS, 11)


def test_iter_batches_keeps_the_last_partial_batch():
    assert list(iter_batches(ROWS, 4)) == [ROWS[0:4], ROWS[4:8], ROWS[8:10]]
    assert list(iter_batches(ROWS, None)) == [ROWS]
    shuffled = list(iter_batches(ROWS, 4, shuffle=True, seed=3))
    assert shuffled == list(iter_batches(ROWS, 4, shuffle=True, seed=3))
    assert sorted(r for b in shuffled for r in b) == sorted(ROWS) and shuffled[0] != ROWS[0:4]
