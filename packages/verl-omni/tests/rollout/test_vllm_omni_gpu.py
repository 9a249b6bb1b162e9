"""GPU tier: `vLLMOmniHttpServer` on tiny random Qwen-Image, SD3, FLUX.1 and Wan 2.1 folders passes verl-core's
`ServerContractSuite`; an in-memory LoRA changes the samples of Qwen-Image, FLUX and Wan.

The FLUX and Wan cases (their pipelines are written against vllm-omni 0.26.0's sources) have not yet run on a GPU;
`bash benchmarks/gpu_suite.sh vllm` runs them.

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
FRAMES = {"wan": 5}
"""Frames per sample of the video models (Wan: 4k + 1)."""


def _sampling(model: str, **changes) -> dict:
    return {**SAMPLING, **({"num_frames": FRAMES[model]} if model in FRAMES else {}), **changes}


def _transformer_weights(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted((folder / "transformer").glob("*.safetensors"))
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def _backend(model: str, tmp_path_factory) -> ContractBackend:
    """A tiny random `model` pipeline folder served by `vLLMOmniHttpServer`, new weights from other seeds."""
    from verl_omni.rollout.vllm_omni.server import vLLMOmniHttpServer
    from verl_omni.testing import build_tiny_pipeline

    root = tmp_path_factory.mktemp(f"vllm-omni-tiny-{model}")
    folder = build_tiny_pipeline(model, root / "served", seed=0)
    config = RolloutConfig(model={"path": str(folder)}, name="vllm_omni", enforce_eager=True, seed=1,
                           request_timeout_s=300, launch_timeout_s=900)  # fmt: skip

    def new_weights(seed: int) -> dict[str, torch.Tensor]:
        other = build_tiny_pipeline(model, root / f"weights-{seed}", seed=seed + 100)
        return _transformer_weights(other)

    return ContractBackend(
        server_cls=vLLMOmniHttpServer,
        config=config,
        request={"prompt": "a red square", "seed": 7, "sampling_params": _sampling(model)},
        long_request={"prompt": "a blue circle", "seed": 3,
                      "sampling_params": _sampling(model, num_inference_steps=400, height=256, width=256)},
        new_weights=new_weights,
    )  # fmt: skip


class TestVLLMOmniServerContract(ServerContractSuite):
    """Qwen-Image."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tmp_path_factory) -> ContractBackend:
        return _backend("qwen_image", tmp_path_factory)


class TestVLLMOmniSD3ServerContract(ServerContractSuite):
    """SD3."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tmp_path_factory) -> ContractBackend:
        return _backend("sd3", tmp_path_factory)


class TestVLLMOmniFluxServerContract(ServerContractSuite):
    """FLUX.1 (guidance-distilled; not yet run on a GPU)."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tmp_path_factory) -> ContractBackend:
        return _backend("flux", tmp_path_factory)


class TestVLLMOmniWanServerContract(ServerContractSuite):
    """Wan 2.1, 5-frame videos (not yet run on a GPU)."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tmp_path_factory) -> ContractBackend:
        return _backend("wan", tmp_path_factory)


@pytest.mark.parametrize("model", ["qwen_image", "flux", "wan"])
def test_vllm_omni_in_memory_lora_changes_samples_and_a_zero_binding_adapter_is_refused(model, tmp_path):
    """`OmniTensorLoRARequest` through `VLLMOmniHijack` on the real engine: an adapter pushed from memory changes the
    samples (and a second version changes them again); an adapter whose modules bind nothing is a `WeightSyncError`
    and the served adapter stays. FLUX's `to_q`/`to_k`/`to_v` bind its fused `to_qkv` through the mapping
    `PackedLoRAMappingMixin` exposes; Wan's bind `attn1.to_qkv` and `attn2`'s separate projections."""
    import re

    from verl_core.rollout.errors import WeightSyncError
    from verl_core.testing.server_contract import run
    from verl_omni.rollout.vllm_omni.server import vLLMOmniHttpServer
    from verl_omni.testing import build_tiny_pipeline, random_transformer_lora

    folder = build_tiny_pipeline(model, tmp_path / "served", seed=0)
    config = RolloutConfig(model={"path": str(folder)}, name="vllm_omni", enforce_eager=True, seed=1,
                           lora={"rank": 8}, request_timeout_s=300, launch_timeout_s=900)  # fmt: skip
    request = {"prompt": "a red square", "seed": 7, "sampling_params": _sampling(model)}
    server = vLLMOmniHttpServer(config)
    run(server.launch())
    try:
        base = run(server.generate(request)).trajectory["latents"]
        tensors, peft = random_transformer_lora(folder, seed=1)
        run(server.update_weights(tensors, version=1, kind="lora", peft_config=peft))
        first = run(server.generate(request)).trajectory["latents"]
        assert not torch.allclose(first, base, atol=1e-3), "the in-memory LoRA did not change the samples"
        tensors2, _ = random_transformer_lora(folder, seed=2)
        run(server.update_weights(tensors2, version=2, kind="lora", peft_config=peft))
        second = run(server.generate(request)).trajectory["latents"]
        assert not torch.allclose(second, first, atol=1e-3), "the second adapter version was not applied"
        wrong = {re.sub(r"blocks\.(\d+)\.", r"no_such_blocks.\1.", k): v for k, v in tensors.items()}
        with pytest.raises(WeightSyncError, match="binds zero modules"):
            run(server.update_weights(wrong, version=3, kind="lora", peft_config=peft))
        assert server.weight_version == 2
        again = run(server.generate(request)).trajectory["latents"]
        torch.testing.assert_close(again, second)
    finally:
        run(server.shutdown())
