"""`RolloutReplica` launches `DiffusersHttpServer`s from a `DiffusionRolloutConfig` on Ray; the agent loop uses it."""

from __future__ import annotations

import pytest
import torch

from verl_core.rollout.replica import RolloutReplica
from verl_core.testing.server_contract import run
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.rollout import DiffusionAgentLoop, pin_sde_window
from verl_omni.testing import TINY_LORA, random_transformer_lora

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never join another run's Ray
    yield
    ray.shutdown()


def test_replica_serves_the_agent_loop_and_takes_lora_updates(ray_cluster, tiny_qwen_image_path):
    pipeline = {"height": 32, "width": 32, "num_inference_steps": 4, "max_sequence_length": 32}
    algo = {"noise_level": 0.7, "sde_window_size": 2, "sde_window_range": [0, 2]}  # window at 0: latents[:, 0] is x_T
    config = DiffusionRolloutConfig(dtype="float32", device="cpu", n=2, pipeline=pipeline, algo=algo)
    config = config.with_model(str(tiny_qwen_image_path))
    replica = RolloutReplica(config, num_servers=1)
    sampling = pin_sde_window(config.sampling_config("qwen_image"), step=0)
    lora, _ = random_transformer_lora(tiny_qwen_image_path, seed=1)

    async def scenario():
        try:
            await replica.launch()
            loop = DiffusionAgentLoop(replica, timeout_s=60)
            before = await loop.generate(["a cat", "a dog"], sampling=sampling, seed=5)
            synced = await replica.update_weights(lora, version=1, kind="lora", peft_config=TINY_LORA)
            after = await loop.generate(["a cat", "a dog"], sampling=sampling, seed=5)
            return before, synced, after
        finally:
            await replica.shutdown()

    before, synced, after = run(scenario())
    assert before.trajectory.batch_size == torch.Size([4]) and before.server_ranks == [0, 0]
    assert synced[0]["weight_version"] == 1 and synced[0]["kind"] == "lora"
    assert after.weight_versions == [1, 1] and after.trajectory["weight_version"].tolist() == [1] * 4
    assert torch.equal(before.trajectory["latents"][:, 0], after.trajectory["latents"][:, 0])  # same seeds
    assert not torch.equal(before.trajectory["latents"][:, -1], after.trajectory["latents"][:, -1])  # new weights
    assert after.trajectory["images"].dtype == torch.uint8
