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


class _FakeQueue:
    """`ray.util.queue.Queue`'s surface over a stdlib queue (no Ray needed)."""

    def __init__(self, maxsize: int = 0, actor_options=None) -> None:
        self.q: queue.Queue = queue.Queue(maxsize)

    def put(self, item, block=True, timeout=None):
        from ray.util.queue import Full

        try:
            self.q.put(item, block, timeout)
        except queue.Full as e:
            raise Full from e

    def get(self, block=True, timeout=None):
        return self.q.get(block, timeout)

    def qsize(self) -> int:
        return self.q.qsize()

    def shutdown(self) -> None:
        pass


class _FakeRollout:
    """Generates instantly with the version it serves; records each request's version."""

    def __init__(self) -> None:
        import types

        self.served, self.requests = 0, []
        self.config = types.SimpleNamespace(request_timeout_s=5)

    def generate(self, records, sampling, seed):
        self.requests.append((seed, self.served))
        n = 2 * len(records)
        return TensorDict(
            {
                "prompt_index": torch.arange(len(records)).repeat_interleave(2),
                "weight_version": torch.full((n,), self.served),
                "server_rank": torch.zeros(n, dtype=torch.int64),
            },
            [n],
        )

    def weight_targets(self):
        return ["http://127.0.0.1:1"]


class _Prompts:
    def __init__(self) -> None:
        self.drawn = 0

    def next_batch(self):
        self.drawn += 1
        return [f"p{self.drawn}a", f"p{self.drawn}b"]

    def state_dict(self):
        return {"drawn": self.drawn}

    def load_state_dict(self, state):
        self.drawn = state["drawn"]


def test_the_producer_runs_at_most_threshold_versions_ahead_and_pushes_wait_for_the_request(monkeypatch):
    import time

    import ray.util.queue

    from verl_omni.trainer.separate_rollout import SeparateRollout

    monkeypatch.setattr(ray.util.queue, "Queue", _FakeQueue)
    rollout = _FakeRollout()
    producer = SeparateRollout(
        rollout, _Prompts(), lambda k: (None, 0, k), threshold=1, queue_size=100, version=0, first_batch=1
    )
    producer.start()
    try:
        deadline = time.monotonic() + 5
        while len(rollout.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # batch 3 would need version >= 1: it must not start
        assert rollout.requests == [(1, 0), (2, 0)]
        with producer.pause():  # the push: the producer is between requests
            rollout.served = 1
            producer.set_version(1)
        while len(rollout.requests) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)
        assert rollout.requests == [(1, 0), (2, 0), (3, 1)]
        groups = [producer.queue.get() for _ in range(6)]
        assert [(g.batch_index, g.version) for g in groups] == [(1, 0), (1, 0), (2, 0), (2, 0), (3, 1), (3, 1)]
        assert [g.sampler_state for g in groups[:2]] == [None, {"drawn": 1}]  # the batch's last group carries it
        producer.check()  # no failure
    finally:
        producer.stop()


class _SlowRollout(_FakeRollout):
    """Each request takes a while; `in_flight` tells whether one is running."""

    in_flight = False

    def generate(self, records, sampling, seed):
        import time

        self.in_flight = True
        time.sleep(0.05)
        out = super().generate(records, sampling, seed)
        self.in_flight = False
        return out


def test_a_pause_holds_the_rollout_between_two_requests(monkeypatch):
    import time

    import ray.util.queue

    from verl_omni.trainer.separate_rollout import SeparateRollout

    monkeypatch.setattr(ray.util.queue, "Queue", _FakeQueue)
    rollout = _SlowRollout()
    producer = SeparateRollout(
        rollout, _Prompts(), lambda k: (None, 0, k), threshold=1000, queue_size=1000, version=0, first_batch=1
    )
    producer.start()
    try:
        for _ in range(5):  # the producer generates back to back; each pause lands between two requests
            time.sleep(0.07)
            with producer.pause():
                assert not rollout.in_flight
                before = len(rollout.requests)
                time.sleep(0.1)
                assert not rollout.in_flight and len(rollout.requests) == before
    finally:
        producer.stop()


def _wait_for(condition, timeout_s: float = 5.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_paused_producer_resumes_on_relaunched_servers_without_losing_a_batch(monkeypatch):
    """The weight push met the dead server (inside `pause()`, the producer waiting on the version gate): `resume`
    hands the running producer the new servers; the next batch goes to them, nothing is drawn again."""
    import ray.util.queue

    from verl_omni.trainer.separate_rollout import SeparateRollout

    monkeypatch.setattr(ray.util.queue, "Queue", _FakeQueue)
    old, new, prompts = _FakeRollout(), _FakeRollout(), _Prompts()
    producer = SeparateRollout(
        old, prompts, lambda k: (None, 0, k), threshold=0, queue_size=100, version=0, first_batch=1
    )
    producer.start()
    try:
        _wait_for(lambda: producer.queue.qsize() == 2)  # batch 1 done; batch 2 waits for version 1
        with pytest.raises(RuntimeError, match=r"only inside pause\(\)"):
            producer.resume(new, 1)
        with producer.pause():
            new.served = 1
            producer.resume(new, 1)
            producer.set_version(1)
        _wait_for(lambda: producer.queue.qsize() == 4)
        assert old.requests == [(1, 0)] and new.requests[0] == (2, 1) and prompts.drawn == 2
        groups = [producer.queue.get() for _ in range(4)]
        assert [(g.batch_index, g.version) for g in groups] == [(1, 0), (1, 0), (2, 1), (2, 1)]
        producer.check()
    finally:
        producer.stop()


class _DyingRollout(_FakeRollout):
    """Its server dies during the first request (after `in_flight` is set)."""

    in_flight = False

    def generate(self, records, sampling, seed):
        import time

        from verl_omni.trainer.colocated_rollout import RolloutServiceError

        self.in_flight = True
        time.sleep(0.1)
        raise RolloutServiceError("rollout server rank 0 died during generate: killed")


def test_a_failed_request_is_seen_by_the_pause_that_waited_for_it_and_resume_regenerates_the_batch(monkeypatch):
    """A push waiting for the request in flight sees its failure as soon as it holds the rollout (so it does not
    take a stopped producer for a paused one); `resume` then draws the lost batch again on the new servers."""
    import ray.util.queue

    from verl_omni.trainer.colocated_rollout import RolloutServiceError
    from verl_omni.trainer.separate_rollout import SeparateRollout

    monkeypatch.setattr(ray.util.queue, "Queue", _FakeQueue)
    dying, new, prompts = _DyingRollout(), _FakeRollout(), _Prompts()
    producer = SeparateRollout(
        dying, prompts, lambda k: (None, 0, k), threshold=1, queue_size=100, version=0, first_batch=1
    )
    producer.start()
    try:
        _wait_for(lambda: dying.in_flight)
        with producer.pause():
            assert isinstance(producer.error, RolloutServiceError)
            producer.resume(new, 0)
        _wait_for(lambda: producer.queue.qsize() >= 2)
        assert new.requests[0] == (1, 0)  # batch 1 again, with its seed
        assert [producer.queue.get().batch_index for _ in range(2)] == [1, 1]
        producer.check()
    finally:
        producer.stop()
