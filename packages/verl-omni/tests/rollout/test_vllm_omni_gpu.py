"""GPU tier: `vLLMOmniHttpServer` on a tiny random Qwen-Image folder passes verl-core's `ServerContractSuite`.

Needs one CUDA GPU and `pip install "./packages/verl-omni[vllm-omni]"` (a supported vllm-omni / vllm pair);
skipped otherwise. Run: `python -m pytest packages/verl-omni/tests/rollout/test_vllm_omni_gpu.py -ra`.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from verl_core.config import RolloutConfig
from verl_core.testing.server_contract import ContractBackend, ServerContractSuite

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(
        importlib.util.find_spec("vllm_omni") is None, reason='needs pip install "verl-omni[vllm-omni]"'
    ),
]

SAMPLING = {"n": 2, "num_inference_steps": 4, "height": 128, "width": 128, "max_sequence_length": 32}


def _transformer_weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted((folder / "transformer").glob("*.safetensors"))
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


class TestVLLMOmniServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tmp_path_factory) -> ContractBackend:
        from verl_omni.rollout.vllm_omni.server import vLLMOmniHttpServer
        from verl_omni.testing import build_tiny_pipeline

        root = tmp_path_factory.mktemp("vllm-omni-tiny")
        folder = build_tiny_pipeline("qwen_image", root / "served", seed=0)
        config = RolloutConfig(model={"path": str(folder)}, name="vllm_omni", enforce_eager=True, seed=1,
                               request_timeout_s=300, launch_timeout_s=900)  # fmt: skip

        def new_weights(seed: int) -> dict[str, torch.Tensor]:
            other = build_tiny_pipeline("qwen_image", root / f"weights-{seed}", seed=seed + 100)
            return _transformer_weights(other)

        return ContractBackend(
            server_cls=vLLMOmniHttpServer,
            config=config,
            request={"prompt": "a red square", "seed": 7, "sampling_params": SAMPLING},
            long_request={"prompt": "a blue circle", "seed": 3,
                          "sampling_params": {**SAMPLING, "num_inference_steps": 400, "height": 256, "width": 256}},
            new_weights=new_weights,
        )  # fmt: skip

    @pytest.mark.skip(
        reason="vLLMOmniHttpServer has no _engine_read_weights: vLLM-Omni's transformer fuses and re-shards the "
        "diffusers tensors on load (e.g. to_q/to_k/to_v into one qkv), so a sent tensor has no served twin to compare "
        "with; the suite's update tests still check that the weight version advances and the output changes"
    )
    def test_contract_served_weights_equal_sent(self, backend, server, path) -> None:  # type: ignore[override]
        raise AssertionError("skipped")
