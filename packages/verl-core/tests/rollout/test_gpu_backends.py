"""GPU checks: HFHttpServer frees and restores accelerator memory; the contract suite on vLLM when installed."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.server_contract import ContractBackend, ServerContractSuite, run
from verl_core.testing.tiny_llm import build_tiny_llm, random_state_dict

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
GREEDY = {"prompt": "the man said that", "sampling_params": {"max_tokens": 8, "temperature": 0.0}}


def test_hf_gpu_sleep_moves_weights_off_the_accelerator(tmp_path):
    folder = build_tiny_llm(tmp_path / "m", hidden_size=256, num_layers=4)
    server = HFHttpServer(RolloutConfig(model={"path": str(folder)}, device="cuda"))
    run(server.launch())
    try:
        before = run(server.generate(GREEDY))
        on_gpu = server.metrics_snapshot()["param_bytes_on_accelerator"]
        allocated = torch.cuda.memory_allocated()
        run(server.sleep(level=1))
        assert server.metrics_snapshot()["param_bytes_on_accelerator"] == 0
        assert torch.cuda.memory_allocated() <= allocated - on_gpu + (1 << 20)
        run(server.update_weights(random_state_dict(folder, seed=3), version=2, bucket_bytes=1 << 20))  # while asleep
        run(server.wake_up())
        assert server.metrics_snapshot()["param_bytes_on_accelerator"] == on_gpu
        after = run(server.generate(GREEDY))
        assert after.weight_version == 2 and after.token_ids != before.token_ids
    finally:
        run(server.shutdown())


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm (pip install 'verl-core[vllm]')")
class TestVLLMServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tmp_path_factory) -> ContractBackend:
        from verl_core.rollout.vllm import vLLMHttpServer

        folder = build_tiny_llm(tmp_path_factory.mktemp("vllm-tiny"), hidden_size=256, num_layers=2)
        config = RolloutConfig(
            model={"path": str(folder)}, name="vllm", gpu_memory_utilization=0.2, enforce_eager=True, max_model_len=512
        )
        return ContractBackend(
            server_cls=vLLMHttpServer,
            config=config,
            request={"prompt_ids": [4, 5, 6, 7], "seed": 7, "sampling_params": {"max_tokens": 8}},
            long_request={"prompt_ids": [4, 5], "sampling_params": {"max_tokens": 500, "ignore_eos": True}},
            new_weights=lambda seed: random_state_dict(folder, seed=seed),
        )
