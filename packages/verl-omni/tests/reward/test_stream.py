"""`reward.stream`: groups are scored while the step is still generating, and joined in batch order.

The real `DiffusionAgentLoop` drives a scripted backend (each request answers when the test's condition holds) and
the real `VisualRewardManager` scores with a deliberately slow reward function; the assertions are on the order of
events, never on timings.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
import torch
from tensordict import TensorDict

from verl_omni.pipelines import DiffusionSamplingConfig
from verl_omni.reward import RewardConfig, VisualRewardManager
from verl_omni.reward.batch import RewardBatch, RewardFunctionError
from verl_omni.reward.stream import RewardStream
from verl_omni.rollout import DiffusionAgentLoop

N = 2
SLOW = """
import time

def compute_score(data_source, solution_image, ground_truth, extra_info, **kwargs):
    time.sleep(0.2)  # deliberately slow: the scoring must hide behind the generation still running
    return float(solution_image.double().mean()) / 255.0
"""


class _Scripted:
    """A backend whose request `i` answers once `ready(i)` holds (or after 10 s, so nothing waits forever)."""

    def __init__(self, images: torch.Tensor, ready, events: list) -> None:
        self.images, self.ready, self.events = images, ready, events

    async def generate(self, request):
        first = (request["seed"] - 1000) // N  # the request's first prompt (seed = base + row)
        deadline = time.monotonic() + 10.0
        while not self.ready(first) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.events.append(("generated", first * N))
        rows = self.images[first * N : first * N + N]
        trajectory = TensorDict({"images": rows}, batch_size=[N])
        return {"trajectory": trajectory, "finish_reason": "stop", "weight_version": 0, "server_rank": 0}


def _records(k: int) -> list:
    return [
        SimpleNamespace(prompt=f"p{i}", data_source="custom", ground_truth=None, extra_info={"i": i}) for i in range(k)
    ]


@pytest.fixture
def manager(write_reward_file):
    path = write_reward_file(SLOW)
    config = RewardConfig(pool="thread", num_workers=2, custom_reward_function={"path": path})
    with VisualRewardManager(config) as manager:
        yield manager


def test_a_group_is_scored_before_the_last_generation_finishes(manager, make_images):
    images = make_images(3, 3, size=16)  # 3 prompts x n=2, one request each
    records = _records(3)
    stream = RewardStream(manager, records, n=N, step=3, timeout_s=30, max_workers=2)
    events = stream.events  # the stream's ("submitted" | "scored", row) and the backend's ("generated", row)

    def ready(first: int) -> bool:  # the last request answers only once the slow function has scored group 0
        return first < 2 or ("scored", 0) in events

    loop = DiffusionAgentLoop(_Scripted(images, ready, events), prompts_per_request=1)
    with stream:
        out = asyncio.run(loop.generate([r.prompt for r in records], sampling=DiffusionSamplingConfig(n=N), seed=1000,
                                        on_request_done=stream.submit))  # fmt: skip
        scored = stream.collect(out.trajectory.batch_size[0])
    assert events.index(("submitted", 0)) < events.index(("scored", 0)) < events.index(("generated", 4)), events
    whole = manager.score(RewardBatch.from_records(images, [r for r in records for _ in range(N)]), step=3)
    torch.testing.assert_close(scored.scores, whole.scores, rtol=0, atol=0)


def test_groups_that_finish_out_of_order_are_joined_in_batch_order(manager, make_images):
    images = make_images(2, 2, size=16)  # 2 prompts x n=2: smooth, smooth | noise, noise
    records = _records(2)
    events: list = []
    holder: dict = {}

    def ready(first: int) -> bool:  # the first request answers only once the second group has been scored
        return first == 1 or ("scored", N) in holder.get("events", [])

    loop = DiffusionAgentLoop(_Scripted(images, ready, events), prompts_per_request=1)
    with RewardStream(manager, records, n=N, step=3, timeout_s=30, max_workers=2) as stream:
        holder["events"] = stream.events
        out = asyncio.run(loop.generate([r.prompt for r in records], sampling=DiffusionSamplingConfig(n=N), seed=1000,
                                        on_request_done=stream.submit))  # fmt: skip
        scored = stream.collect(out.trajectory.batch_size[0])
    assert stream.events.index(("scored", N)) < stream.events.index(("scored", 0))  # completion order: 1 then 0
    whole = manager.score(RewardBatch.from_records(images, [r for r in records for _ in range(N)]), step=3)
    assert not torch.equal(whole.scores[:N], whole.scores[N:])  # the groups' scores differ: an order swap shows
    torch.testing.assert_close(scored.scores, whole.scores, rtol=0, atol=0)


def test_collect_names_groups_missing_from_the_batch(manager, make_images):
    images = make_images(1, 1, size=16)
    with RewardStream(manager, _records(2), n=N, timeout_s=30) as stream:
        stream.submit(1, 1, TensorDict({"images": images}, batch_size=[N]))
        with pytest.raises(RuntimeError, match=r"groups at rows \[2\] do not cover the batch's 4 rows"):
            stream.collect(4)


def test_a_failing_group_names_the_step_and_its_sample_index_in_the_whole_batch(write_reward_file, make_images):
    path = write_reward_file(
        """
        def compute_score(data_source, solution_image, ground_truth, extra_info, **kwargs):
            if extra_info["i"] == 1:
                raise ValueError("bad image")
            return 0.5
        """,
        name="fails.py",
    )
    config = RewardConfig(pool="thread", num_workers=2, custom_reward_function={"path": path})
    images = make_images(2, 2, size=16)
    with VisualRewardManager(config) as manager, RewardStream(manager, _records(2), n=N, step=7) as stream:
        stream.submit(1, 1, TensorDict({"images": images[N:]}, batch_size=[N]))
        stream.submit(0, 1, TensorDict({"images": images[:N]}, batch_size=[N]))
        with pytest.raises(RewardFunctionError, match=r"at step 7 on sample 2 ") as info:
            stream.collect(2 * N)
    assert isinstance(info.value.__cause__, ValueError)
