"""`DiffusersHttpServer` on a CUDA GPU (bf16): binary trajectories, sleep levels free GPU memory, LoRA sync."""

from __future__ import annotations

import pytest
import torch

from verl_core.rollout.client import RolloutClient
from verl_core.testing.server_contract import canonical, run
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.rollout import DiffusersHttpServer
from verl_omni.testing import random_transformer_lora

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
SAMPLING = {"n": 4, "num_inference_steps": 4, "height": 64, "width": 64, "max_sequence_length": 32}
REQUEST = {"prompt": "a cat on a red chair", "seed": 7, "sampling_params": SAMPLING}


@pytest.mark.parametrize("model", ["qwen_image", "sd3"])
def test_gpu_server_round_trip_sleep_and_lora(model, request):
    path = request.getfixturevalue(f"tiny_{model}_path")
    config = DiffusionRolloutConfig(dtype="bfloat16", device="cuda", n=4).with_model(str(path))
    server = DiffusersHttpServer(config)
    run(server.launch())

    async def over_http():
        client = RolloutClient(server.address)
        try:
            return await client.generate(REQUEST)
        finally:
            await client.aclose()

    try:
        in_process = run(server.generate(REQUEST))
        http = run(over_http())
        traj = http["trajectory"]
        assert traj["latents"].dtype == torch.float32 and traj["images"].dtype == torch.uint8
        assert canonical(traj) == canonical(in_process.trajectory)  # one engine, one request: bit-identical
        on_gpu = server.metrics_snapshot()["param_bytes_on_accelerator"]
        assert on_gpu > 0
        before_sleep = torch.cuda.memory_allocated()
        run(server.sleep(level=1))
        assert server.metrics_snapshot()["param_bytes_on_accelerator"] == 0
        assert torch.cuda.memory_allocated() <= before_sleep - on_gpu  # freed without a gc pass
        run(server.wake_up())
        assert server.metrics_snapshot()["param_bytes_on_accelerator"] == on_gpu
        tensors, peft_config = random_transformer_lora(path, seed=1)
        run(server.update_weights(tensors, version=2, kind="lora", peft_config=peft_config))
        with_lora = run(server.generate(REQUEST))
        assert with_lora.weight_version == 2
        assert not torch.equal(with_lora.trajectory["latents"], in_process.trajectory["latents"])
        run(server.sleep(level=1))  # the pristine copies of the merged LoRA layers leave the GPU with the pipeline
        pristine = [b for n, b in server._engine.transformer.named_buffers() if "pristine" in n]
        assert pristine and all(b.device.type == "cpu" for b in pristine)
        run(server.wake_up())
        assert canonical(run(server.generate(REQUEST)).trajectory) == canonical(with_lora.trajectory)
        served = run(server.served_weights(list(tensors), kind="lora"))
        assert all(torch.equal(served[n], t.to(served[n].dtype)) for n, t in tensors.items())
        allocated = torch.cuda.memory_allocated()
        run(server.sleep(level=2))
        assert torch.cuda.memory_allocated() <= allocated - on_gpu  # the pipeline is gone
        run(server.wake_up())
        again = run(server.generate(REQUEST))
        assert again.weight_version == 2
        assert canonical(again.trajectory) == canonical(with_lora.trajectory)
    finally:
        run(server.shutdown())
