"""`RayRewardPool` on a local Ray (2 CPUs): a batch scored on actors, a raising function, a hung worker
and a killed worker, each reported by name within `reward.timeout_s`."""

from __future__ import annotations

import textwrap

import pytest
import torch

from verl_omni.reward import (
    RayRewardPool,
    RewardBatch,
    RewardConfig,
    RewardFunctionError,
    RewardWorkerError,
    VisualRewardManager,
)

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

REWARD_FILE = """
    import time

    def compute_score(data_source, solution_image, ground_truth, extra_info, **kwargs):
        if data_source == "hang":
            time.sleep(60)
        if data_source == "boom":
            raise KeyError("missing label")
        return solution_image.float().mean().item() / 255
"""


@pytest.fixture(scope="module")
def ray_pool(tmp_path_factory):
    """One local Ray session and one pool of 2 reward actors for the module (actor start-up dominates)."""
    path = tmp_path_factory.mktemp("ray_reward") / "r.py"
    path.write_text(textwrap.dedent(REWARD_FILE))
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never join another run's Ray
    config = _config(str(path), timeout_s=60)
    pool = RayRewardPool(config, start_timeout_s=120)
    yield config, pool
    pool.close()
    ray.shutdown()


def _config(path, timeout_s):
    return RewardConfig(
        pool="ray", num_workers=2, num_cpus_per_worker=0.5, timeout_s=timeout_s, custom_reward_function={"path": path}
    )


def _batch(images, sources):
    n = len(sources)
    return RewardBatch(images, ["p"] * n, sources, [None] * n, [{}] * n)


def test_ray_pool_scores_a_batch_and_reports_a_raise(ray_pool, make_images):
    config, pool = ray_pool
    manager = VisualRewardManager(config, pool=pool)
    images = make_images(2, 3)
    out = manager.score(_batch(images, ["ok"] * 5), step=0)
    torch.testing.assert_close(out.scores, images.float().mean(dim=(1, 2, 3)) / 255)
    with pytest.raises(
        RewardFunctionError,
        match=r"failed at step 3 on sample 4 \(data_source 'boom'\): raised "
        r"KeyError",
    ) as info:
        manager.score(_batch(images, ["ok", "ok", "ok", "ok", "boom"]), step=3)
    assert isinstance(info.value.__cause__, KeyError)
    assert "traceback in reward worker 1 (Ray actor" in "\n".join(getattr(info.value, "__notes__", []))


def test_more_reward_cpus_than_the_cluster_has_fails_at_once(ray_pool):
    config = RewardConfig(pool="ray", num_workers=3, num_cpus_per_worker=1)  # the session has 2 CPUs
    with pytest.raises(
        ValueError,
        match=r"reward\.num_workers \(3\) x reward\.num_cpus_per_worker \(1\) = 3 CPUs, "
        r"but the Ray cluster has 2",
    ):
        RayRewardPool(config)


def test_a_worker_that_cannot_build_its_scorer_fails_the_start(ray_pool, tmp_path):
    config = _config(str(tmp_path / "gone.py"), timeout_s=60).evolve(num_workers=1)  # no driver-side check here
    with pytest.raises(
        RewardWorkerError,
        match=r"(?s)reward worker 0 \(Ray actor [0-9a-f]+\) failed to start: .*"
        r"reward\.custom_reward_function\.path: no such file",
    ):
        RayRewardPool(config, start_timeout_s=120)


def test_hung_and_killed_workers_are_named_within_the_timeout(ray_pool, make_images):
    config, pool = ray_pool
    manager = VisualRewardManager(config.evolve(timeout_s=2.0), pool=pool)  # runs last: it breaks the pool
    images = make_images(2, 2)
    with pytest.raises(
        TimeoutError,
        match=r"reward worker 1 \(Ray actor [0-9a-f]+, pid \d+, node .*\) did not "
        r"answer within 2 s \(reward\.timeout_s\)",
    ):
        manager.score(_batch(images, ["ok", "ok", "hang", "hang"]), step=1)  # would sleep 60 s unbounded
    ray.kill(pool.actors[0])
    with pytest.raises(RewardWorkerError, match=r"reward worker 0 \(Ray actor .*\) died while scoring"):
        manager.score(_batch(images, ["ok"] * 4), step=2)
