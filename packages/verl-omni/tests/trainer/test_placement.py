"""Placement never waits forever: a pool the cluster cannot hold fails naming the pool, its request and what the
cluster has; `trainer.separate.share_devices` runs separate mode on one device. A local Ray with one logical GPU
stands in for the one-GPU H200 (placement groups reserve logical resources; no CUDA is touched)."""

from __future__ import annotations

import time

import pytest

from verl_omni.trainer.components import _use_gpu
from verl_omni.trainer.config import load_config
from verl_omni.trainer.placement import PlacementError, ResourcePool

pytestmark = [pytest.mark.ray]

SEPARATE = [
    "trainer.mode=separate",
    "trainer.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.free_cache_engine=false",
]


@pytest.fixture(scope="module")
def one_gpu_ray():
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=4, num_gpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def actor_pool(one_gpu_ray):
    """The actor's pool on the one GPU, as `build_components` places it first."""
    pool = ResourcePool(load_config(SEPARATE), use_gpu=True, fail_fast=True)
    pool.create()
    yield pool
    pool.remove()


def test_a_rollout_pool_of_its_own_on_one_gpu_fails_at_once_naming_the_pool_and_share_devices(actor_pool):
    rollout = ResourcePool(load_config(SEPARATE), use_gpu=True, prefix="actor_rollout_ref.rollout", fail_fast=True)
    start = time.monotonic()
    with pytest.raises(PlacementError) as info:
        rollout.create()
    assert time.monotonic() - start < 5  # no wait: nothing can free a GPU of a private local Ray
    msg = str(info.value)
    assert "the rollout pool cannot be placed" in msg, msg
    assert "actor_rollout_ref.rollout.nnodes=1 x actor_rollout_ref.rollout.n_gpus_per_node=1" in msg, msg
    assert "{'GPU': 1}" in msg and "'GPU': 0.0} free of {'CPU': 4.0, 'GPU': 1.0}" in msg, msg
    assert "trainer.separate.share_devices=true" in msg, msg
    assert rollout.groups == []


def test_placement_on_a_joined_cluster_times_out_naming_the_pool_and_the_key(actor_pool):
    config = load_config([*SEPARATE, "trainer.ray_wait_register_center_timeout=1"])
    rollout = ResourcePool(config, use_gpu=True, prefix="actor_rollout_ref.rollout")  # may grow: it waits
    start = time.monotonic()
    with pytest.raises(PlacementError, match=r"the rollout pool could not be placed within 1 s "
                       r"\(trainer\.ray_wait_register_center_timeout\): it asks .*the cluster has 1 node\(s\) with "
                       r"\{'CPU': 4\.0, 'GPU': 1\.0\}"):  # fmt: skip
        rollout.create()
    assert time.monotonic() - start < 30
    assert rollout.groups == []  # the pending group is removed, not left to grab the GPU later


def test_an_actor_pool_too_big_for_the_cpus_names_the_actor_pool(one_gpu_ray):
    pool = ResourcePool(
        load_config(["trainer.n_gpus_per_node=64", "data.train_batch_size=64"]), use_gpu=False, fail_fast=True
    )
    with pytest.raises(PlacementError, match=r"the actor pool cannot be placed: it asks trainer\.nnodes=1 x "
                       r"trainer\.n_gpus_per_node=64 bundles of \{'CPU': 1\}.*\{'CPU': 64\}"):  # fmt: skip
        pool.create()


def test_share_devices_needs_only_the_actors_gpus():
    one_gpu = {"GPU": 1.0, "CPU": 16.0}
    own_pool = load_config([*SEPARATE, "trainer.device=cuda"])
    with pytest.raises(ValueError, match=r"the run needs .*actor_rollout_ref\.rollout\.nnodes x n_gpus_per_node = 2"):
        _use_gpu(own_pool, one_gpu)
    shared = load_config(
        [*SEPARATE, "actor_rollout_ref.rollout.nnodes=0", "trainer.separate.share_devices=true", "trainer.device=cuda"]
    )
    assert _use_gpu(shared, one_gpu) is True


def test_bench_separate_on_cuda_asks_only_the_actors_gpu():
    """`benchmarks/bench_separate.py --device cuda` (one H200): every variant's config loads and fits one GPU."""
    import importlib.util
    import pathlib
    import sys

    path = pathlib.Path(__file__).resolve().parents[4] / "benchmarks" / "bench_separate.py"
    spec = importlib.util.spec_from_file_location("bench_separate", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.modules.pop(spec.name, None)
    one_gpu = {"GPU": 1.0, "CPU": 16.0}
    for name in bench.VARIANTS:
        overrides = bench.variant_overrides(name, share_devices=True)
        config = load_config([*overrides, "trainer.device=cuda"], config_name="quickstart")  # as the bench runs
        assert _use_gpu(config, one_gpu) is True, name
        if "separate" in name:
            assert config.trainer.mode == "separate" and config.trainer.separate.share_devices, name
