"""verl-core's server contract suite against `DiffusersHttpServer` (full and LoRA; Qwen-Image, SD3, FLUX)."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from verl_core.testing.server_contract import ContractBackend, ServerContractSuite
from verl_omni.config import DiffusionRolloutConfig
from verl_omni.rollout import DiffusersHttpServer
from verl_omni.testing import TINY_LORA, perturbed_transformer_weights, random_transformer_lora

SAMPLING = {"n": 2, "num_inference_steps": 3, "height": 32, "width": 32, "max_sequence_length": 32}
PIPELINE = {"height": 32, "width": 32, "num_inference_steps": 3, "max_sequence_length": 32}


def diffusers_config(path, **overrides) -> DiffusionRolloutConfig:
    """A float32 CPU server config for a tiny pipeline folder (32x32, 3 steps)."""
    base = {"dtype": "float32", "device": "cpu", "request_timeout_s": 60, "pipeline": PIPELINE, "n": 2}
    return DiffusionRolloutConfig(**{**base, **overrides}).with_model(str(path))


def diffusers_backend(path, kind: str = "full") -> ContractBackend:
    """The contract backend of a tiny pipeline folder with full or LoRA weight updates."""
    backend = ContractBackend(
        server_cls=DiffusersHttpServer,
        config=diffusers_config(path),
        request={"prompt": "a cat on a red chair", "seed": 7, "sampling_params": SAMPLING},
        long_request={"prompt": "a long one", "sampling_params": {**SAMPLING, "num_inference_steps": 400}},
        new_weights=functools.lru_cache(maxsize=None)(lambda seed: perturbed_transformer_weights(path, seed=seed)),
    )
    if kind == "full":
        return backend
    lora = functools.lru_cache(maxsize=None)(lambda seed: random_transformer_lora(path, seed=seed)[0])
    return dataclasses.replace(backend, weight_kind="lora", peft_config=dict(TINY_LORA), new_weights=lora)


class TestQwenImageServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_qwen_image_path) -> ContractBackend:
        return diffusers_backend(tiny_qwen_image_path)


class TestQwenImageLoRAServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_qwen_image_path) -> ContractBackend:
        return diffusers_backend(tiny_qwen_image_path, "lora")


@pytest.mark.slow
class TestSD3ServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_sd3_path) -> ContractBackend:
        return diffusers_backend(tiny_sd3_path)


@pytest.mark.slow
class TestSD3LoRAServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_sd3_path) -> ContractBackend:
        return diffusers_backend(tiny_sd3_path, "lora")


@pytest.mark.slow
class TestFluxServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_flux_path) -> ContractBackend:
        return diffusers_backend(tiny_flux_path)


@pytest.mark.slow
class TestFluxLoRAServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_flux_path) -> ContractBackend:
        return diffusers_backend(tiny_flux_path, "lora")
