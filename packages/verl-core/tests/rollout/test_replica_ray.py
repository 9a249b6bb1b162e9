"""`RolloutReplica` on a local Ray cluster (2 CPUs): placement, routing, a killed server reported by rank."""

from __future__ import annotations

import asyncio

import pytest

from verl_core.config import RolloutConfig
from verl_core.rollout.replica import RolloutReplica
from verl_core.testing.server_contract import run

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]

REQUEST = {"prompt_ids": [4, 5, 6], "sampling_params": {"max_tokens": 4}}


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never join another run's Ray
    yield
    ray.shutdown()


def test_replica_places_servers_routes_and_survives_a_dead_rank(ray_cluster, tiny_llm_path):
    replica = RolloutReplica(RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"), num_servers=2)

    async def scenario():
        try:
            addresses = await replica.launch()
            first = await asyncio.gather(*(replica.generate(REQUEST) for _ in range(4)))
            synced = await replica.update_weights({"model.norm.weight": __import__("torch").ones(32)}, version=3)
            ray.kill(replica.actors[0])
            await asyncio.sleep(0.5)
            second = await asyncio.gather(*(replica.generate(REQUEST) for _ in range(3)))
            return addresses, first, synced, second, dict(replica.router.dead)
        finally:
            await replica.shutdown()

    addresses, first, synced, second, dead = run(scenario())
    assert len(set(addresses)) == 2
    assert sorted(r["server_rank"] for r in first) == [0, 0, 1, 1]
    assert {rank: r["weight_version"] for rank, r in synced.items()} == {0: 3, 1: 3}
    assert {r["server_rank"] for r in second} == {1} and all(r["weight_version"] == 3 for r in second)
    assert list(dead) == [0] and "rank 0" in dead[0]
    assert ray.util.list_named_actors() == [] or "verl_server_0" not in ray.util.list_named_actors()


def test_replica_placement_timeout_names_the_key(ray_cluster, tiny_llm_path):
    config = RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu", launch_timeout_s=0.5)
    replica = RolloutReplica(config, num_servers=1, use_gpu=True)  # the test cluster has no GPU: never placed

    async def scenario():
        try:
            await replica.launch()
        finally:
            await replica.shutdown()

    with pytest.raises(
        TimeoutError,
        match=r"verl: placing 1 servers with .*'GPU': 1.* \(the cluster has \{'CPU': \d+\.0, 'GPU': 0\.0\}, .*"
        r"free\) took longer than 0\.5 s \(rollout\.launch_timeout_s\)",
    ):
        run(scenario())


def test_replica_places_servers_in_the_callers_bundles_with_fractional_resources(ray_cluster, tiny_llm_path):
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": 1}], strategy="PACK")
    ray.get(group.ready(), timeout=60)
    replica = RolloutReplica(
        RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu"),
        placement=[(group, 0)],
        num_cpus=0.5,
        name_prefix="colocated",
        runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "VERL_REPLICA_MARK": "colocated"}},
        file_handoff=True,
    )

    def threads_and_mark(server):
        import os

        import torch

        return torch.get_num_threads(), os.environ.get("VERL_REPLICA_MARK")

    async def scenario():
        try:
            addresses = await replica.launch()
            handoff = {addresses[rank]: c.file_handoff for rank, c in replica.router.clients.items()}
            left = ray.available_resources().get(f"CPU_group_0_{group.id.hex()}")
            response = await replica.generate(REQUEST)
            seen = await replica.actors[0].__ray_call__.remote(threads_and_mark)
            return left, response, seen, handoff
        finally:
            await replica.shutdown()

    left, response, seen, handoff = run(scenario())
    assert [(a.startswith("http://127.0.0.1:"), on) for a, on in handoff.items()] == [(True, True)]  # loopback
    assert left == 0.5  # the server holds half of the caller's bundle
    assert seen == (1, "colocated")  # the runtime_env reached the server process
    assert response["server_rank"] == 0
    assert replica._placement_group is None  # the caller's group is not the replica's to free
    remove_placement_group(group)


def test_replica_placement_list_must_match_num_servers(tiny_llm_path):
    config = RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu")
    with pytest.raises(ValueError, match=r"placement: 1 bundles for num_servers=2"):
        RolloutReplica(config, num_servers=2, placement=[(None, 0)])
