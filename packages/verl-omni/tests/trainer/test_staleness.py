"""The separate mode's consumer: stale groups are dropped and counted, waits are bounded, IS weights at lag 0 are 1."""

from __future__ import annotations

import queue

import pytest
import torch
from tensordict import TensorDict

from verl_omni.trainer.staleness import (
    GroupConsumer,
    StaleSampleError,
    VersionedGroup,
    assemble_batch,
    importance_weights,
)


def _group(version: int, tag: int, n: int = 2) -> VersionedGroup:
    rows = TensorDict(
        {"prompt_index": torch.full((n,), 7), "tag": torch.full((n,), tag), "log_probs": torch.zeros(n, 1)},
        batch_size=[n],
    )
    return VersionedGroup(batch_index=tag, version=version, record=f"prompt-{tag}", rows=rows)


def _queue(*groups: VersionedGroup) -> queue.Queue:
    q: queue.Queue = queue.Queue()
    for g in groups:
        q.put(g)
    return q


def test_groups_older_than_the_threshold_are_never_trained_on_and_are_counted():
    # actor at version 5, threshold 2: lags 5-1=4 and 5-2=3 are dropped, 0..2 kept
    source = _queue(_group(1, 0), _group(5, 1), _group(2, 2), _group(3, 3), _group(4, 4), _group(5, 5))
    consumer = GroupConsumer(source, threshold=2, timeout_s=5)
    kept, metrics = consumer.take(3, actor_version=5)
    assert [g.batch_index for g in kept] == [1, 3, 4]
    assert all(5 - g.version <= 2 for g in kept)
    assert metrics["async/dropped_groups"] == 2 and metrics["async/dropped_max_lag"] == 4
    assert metrics["async/version_lag/0"] == 1 and metrics["async/version_lag/2"] == 1
    assert metrics["async/version_lag/1"] == 1 and metrics["async/version_lag_max"] == 2
    records, batch = assemble_batch(kept, actor_version=5)
    assert records == ["prompt-1", "prompt-3", "prompt-4"]
    assert batch["prompt_index"].tolist() == [0, 0, 1, 1, 2, 2]  # renumbered in the step's order
    assert batch["weight_lag"].tolist() == [0, 0, 2, 2, 1, 1]
    assert batch["tag"].tolist() == [1, 1, 3, 3, 4, 4]
    _, more = consumer.take(1, actor_version=5)
    assert more["async/dropped_groups"] == 0 and more["async/dropped_groups_total"] == 2


def test_threshold_zero_trains_only_the_current_version():
    consumer = GroupConsumer(_queue(_group(2, 0), _group(3, 1)), threshold=0, timeout_s=5)
    kept, metrics = consumer.take(1, actor_version=3)
    assert [g.version for g in kept] == [3] and metrics["async/dropped_groups"] == 1


def test_a_group_newer_than_the_actor_weights_is_an_error():
    with pytest.raises(StaleSampleError, match=r"version 4 .* reached an actor at version 3"):
        GroupConsumer(_queue(_group(4, 0)), threshold=1, timeout_s=5).take(1, actor_version=3)


def test_an_empty_queue_times_out_naming_the_key_and_the_servers():
    consumer = GroupConsumer(queue.Queue(), threshold=1, timeout_s=0.3, describe=lambda: "rollout server(s) rank 0")
    with pytest.raises(
        TimeoutError, match=r"0\.3 s \(trainer\.separate\.queue_timeout_s\) from rollout server\(s\) rank 0"
    ):
        consumer.take(1, actor_version=0)


def test_a_dead_producer_fails_the_wait_at_once():
    def dead() -> None:
        raise RuntimeError("rollout server rank 0 died during generate")

    consumer = GroupConsumer(queue.Queue(), threshold=1, timeout_s=60, check_producer=dead)
    with pytest.raises(RuntimeError, match="rank 0 died"):
        consumer.take(1, actor_version=0)


def test_importance_weights_are_one_at_lag_zero_and_truncated_beyond():
    old = torch.tensor([[0.5, 0.0], [3.0, -1.0]])
    rollout = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    batch = TensorDict({"old_log_probs": old, "log_probs": rollout, "weight_lag": torch.tensor([0, 1])}, [2])
    metrics = importance_weights(batch, threshold=2.0)
    w = batch["rollout_is_weights"]
    assert w[0].tolist() == [1.0, 1.0]  # lag 0: behaviour == proximal policy, whatever the numerical gap
    assert w[1, 0].item() == 2.0 and w[1, 1].item() == pytest.approx(torch.exp(torch.tensor(-1.0)).item())
    assert metrics["rollout_corr/logprob_gap_lag0"] == pytest.approx(0.25)
    assert metrics["rollout_corr/logprob_gap_lag1"] == pytest.approx(2.0)
    assert metrics["rollout_corr/is_truncated_frac"] == 0.5
