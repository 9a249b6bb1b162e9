"""`RolloutRouter` over two in-process HF servers: least-outstanding routing, broadcast, dead ranks."""

from __future__ import annotations

import asyncio

import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.errors import BadRequestError, ServerDeadError
from verl_core.rollout.hf import HFHttpServer
from verl_core.rollout.replica import RolloutRouter
from verl_core.testing.server_contract import run

REQUEST = {"prompt_ids": [4, 5, 6], "seed": 1, "sampling_params": {"max_tokens": 4}}


def test_router_balances_broadcasts_and_reports_dead_rank(tiny_llm_path):
    config = RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu")
    servers = [HFHttpServer(config, rank=r) for r in range(2)]
    for s in servers:
        run(s.launch())

    async def scenario():
        router = RolloutRouter([RolloutClient(s.address, rank=s.rank, timeout_s=30) for s in servers])
        try:
            first = await asyncio.gather(*(router.generate(REQUEST) for _ in range(6)))
            states = await router.check_health()
            await router.broadcast("sleep")
            await router.broadcast("wake_up")
            with pytest.raises(BadRequestError, match=r"level") as refused:
                await router.broadcast("sleep", 3)
            assert refused.value.server_rank == 0  # callers name the server that refused
            await servers[0].shutdown()  # rank 0 dies
            second = await asyncio.gather(*(router.generate(REQUEST) for _ in range(4)))
            await servers[1].shutdown()
            with pytest.raises(ServerDeadError, match=r"dead ranks: 0 .*1 "):
                await router.generate(REQUEST)
            return first, states, second, dict(router.dead)
        finally:
            await router.aclose()

    try:
        first, states, second, dead = run(scenario())
    finally:
        for s in servers:
            run(s.shutdown())
    assert sorted(r["server_rank"] for r in first) == [0, 0, 0, 1, 1, 1]
    assert states == {0: "ready", 1: "ready"}
    assert {r["server_rank"] for r in second} == {1}
    assert "rank 0" in dead[0] and set(dead) == {0, 1}
    assert all(r["token_ids"] == first[0]["token_ids"] for r in first + second)  # same seed, same weights


def test_router_needs_clients():
    with pytest.raises(ValueError, match="at least one"):
        RolloutRouter([])


def test_replica_update_weights_uses_the_configured_bucket_size(tiny_llm_path):
    from verl_core.rollout.replica import RolloutReplica

    config = RolloutConfig(model={"path": str(tiny_llm_path)}, device="cpu", update_weights_bucket_bytes=64)
    server = HFHttpServer(config)
    run(server.launch())
    replica = RolloutReplica(config)
    replica.router = RolloutRouter([RolloutClient(server.address, rank=0, timeout_s=30)])

    async def scenario():
        try:
            return await replica.update_weights({"model.norm.weight": torch.ones(32)}, version=2)
        finally:
            await replica.router.aclose()

    try:
        synced = run(scenario())
    finally:
        run(server.shutdown())
    assert synced[0]["weight_version"] == 2 and synced[0]["num_buckets"] == 2  # 128 bytes in 64-byte buckets
