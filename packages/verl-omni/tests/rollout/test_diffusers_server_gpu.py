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


@pytest.mark.parametrize("model", ["qwen_image", "sd3"])
def test_gpu_engine_sleep_uses_reused_pinned_host_copies(model, request, capsys):
    import time

    from verl_omni.pipelines import DiffusionSamplingConfig, make_generators
    from verl_omni.rollout import DiffusersRolloutEngine

    path = request.getfixturevalue(f"tiny_{model}_path")
    sampling = DiffusionSamplingConfig(**SAMPLING)
    engine = DiffusersRolloutEngine(path, device="cuda", dtype=torch.bfloat16, sampling=sampling)
    tensors, peft_config = random_transformer_lora(path, seed=1)
    engine.update_weights(tensors, lora_config=peft_config)  # merged: the pristine buffers must travel too
    first = engine.generate([REQUEST["prompt"]], generator=make_generators(7, 4, engine.device))

    def on_device() -> list[torch.Tensor]:
        return [
            t for m in engine.offload_modules() for t in (*m.parameters(), *m.buffers()) if t.device.type == "cuda"
        ]  # fmt: skip

    moved = on_device()
    pristine = [b for n, b in engine.transformer.named_buffers() if "pristine" in n]
    assert pristine and all(b.is_cuda for b in pristine)
    nbytes = sum({id(t): t.numel() * t.element_size() for t in moved}.values())
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    engine.sleep()
    assert not on_device()
    assert all(t.is_pinned() for t in moved)  # repointed at pinned host copies
    assert torch.cuda.memory_allocated() <= before - nbytes
    host_ptrs = [t.data_ptr() for t in moved]
    engine.wake_up()
    assert all(t.is_cuda for t in moved) and len(on_device()) == len(moved)
    again = engine.generate([REQUEST["prompt"]], generator=make_generators(7, 4, engine.device))
    assert canonical(again) == canonical(first)  # bit-identical after a round trip

    torch.cuda.synchronize()
    start = time.perf_counter()
    engine.sleep()
    slept = time.perf_counter() - start
    assert [t.data_ptr() for t in moved] == host_ptrs  # the second sleep reuses the first one's host copies
    start = time.perf_counter()
    engine.wake_up()
    woke = time.perf_counter() - start
    assert canonical(engine.generate([REQUEST["prompt"]], generator=make_generators(7, 4, engine.device))) == (
        canonical(first)
    )
    with capsys.disabled():
        print(f"\n{model}: {nbytes / 2**20:.1f} MiB, second cycle sleep {slept:.4f} s, wake {woke:.4f} s")


@pytest.mark.parametrize("model", ["qwen_image", "sd3"])
def test_gpu_engine_update_from_host_tensors_equals_update_from_device_tensors(model, request):
    from verl_omni.pipelines import DiffusionSamplingConfig, make_generators
    from verl_omni.rollout import DiffusersRolloutEngine
    from verl_omni.rollout.diffusers.staging import packed_copy

    path = request.getfixturevalue(f"tiny_{model}_path")
    sampling = DiffusionSamplingConfig(**SAMPLING)
    tensors, peft_config = random_transformer_lora(path, seed=1)
    bf16 = {n: t.to(torch.bfloat16) for n, t in tensors.items()}  # what the trainer sends
    pinned = dict(zip(bf16, packed_copy(list(bf16.values()), pin=True)))
    sources = {"cuda": {n: t.cuda() for n, t in bf16.items()}, "pageable": bf16, "pinned": pinned}
    served = {}
    for kind, weights in sources.items():
        engine = DiffusersRolloutEngine(path, device="cuda", dtype=torch.bfloat16, sampling=sampling)
        engine.update_weights(weights, lora_config=peft_config)
        table = engine.weight_table(lora=True)
        images = engine.generate([REQUEST["prompt"]], generator=make_generators(7, 4, engine.device))["images"]
        served[kind] = ({n: t.detach().cpu() for n, t in table.items()}, images.cpu())
    for kind in ("pageable", "pinned"):
        assert served[kind][0].keys() == served["cuda"][0].keys()
        assert all(torch.equal(served[kind][0][n], served["cuda"][0][n]) for n in served["cuda"][0])
        assert torch.equal(served[kind][1], served["cuda"][1])


_PUSHER = """
import json, sys
import torch
from verl_omni.testing import random_transformer_lora
from verl_core.rollout.weight_push import WeightPusher

address, path, version = sys.argv[1], sys.argv[2], int(sys.argv[3])
tensors, peft_config = random_transformer_lora(path, seed=1)
host = {n: t.to(torch.bfloat16) for n, t in tensors.items()}
flat = torch.cat([t.reshape(-1) for t in host.values()]).cuda()  # one flat buffer, as the engine exports
weights = {n: p.view(t.shape) for (n, t), p in zip(host.items(), flat.split([t.numel() for t in host.values()]))}
pusher = WeightPusher("auto")
assert pusher.wants_device_tensors([address])
sent = pusher.push([address], weights, version=version, peft_config=peft_config, bucket_bytes=1 << 20, timeout_s=120)
flat.fill_(0)  # after the answer the server holds its own copies
torch.cuda.synchronize()
pusher.close()
print(json.dumps(sent))
"""


@pytest.mark.parametrize("model", ["qwen_image"])
def test_gpu_lora_pushed_by_cuda_ipc_from_another_process_equals_the_host_update(model, request):
    """The trainer's path on one GPU: rank 0 shares its GPU export, the server copies it device to device."""
    import json
    import os
    import subprocess
    import sys

    path = request.getfixturevalue(f"tiny_{model}_path")
    config = DiffusionRolloutConfig(dtype="bfloat16", device="cuda", n=4).with_model(str(path))
    server = DiffusersHttpServer(config)
    run(server.launch())
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        argv = [sys.executable, "-c", _PUSHER, server.address, str(path), "4"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-4000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {
            "shm_servers": 0.0,
            "cuda_ipc_servers": 1.0,
            "served_versions": [4],
        }
        assert server.metrics_snapshot()["counters"]["weight_updates_cuda_ipc"] == 1
        by_ipc = run(server.generate(REQUEST))
        assert by_ipc.weight_version == 4
        tensors, peft_config = random_transformer_lora(path, seed=1)
        bf16 = {n: t.to(torch.bfloat16) for n, t in tensors.items()}
        served = run(server.served_weights(list(bf16), kind="lora"))
        assert all(torch.equal(served[n], t.to(served[n].dtype)) for n, t in bf16.items())
        run(server.sleep(level=2))  # drops the pipeline: the wake-up reloads it and applies the kept host copy
        run(server.wake_up())
        assert canonical(run(server.generate(REQUEST)).trajectory) == canonical(by_ipc.trajectory)
        run(server.update_weights(bf16, version=5, kind="lora", peft_config=peft_config))
        by_host = run(server.generate(REQUEST))
        assert canonical(by_host.trajectory) == canonical(by_ipc.trajectory)  # the same weights, the same floats
    finally:
        run(server.shutdown())
