"""verl-core's server contract suite against `DiffusersHttpServer` (full and LoRA; Qwen-Image, SD3, FLUX, Wan)."""

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


BACKENDS = [
    pytest.param(("qwen_image", "full"), id="qwen_image-full"),
    pytest.param(("qwen_image", "lora"), id="qwen_image-lora"),
    *(
        pytest.param((model, kind), id=f"{model}-{kind}", marks=pytest.mark.slow)
        for model in ("sd3", "flux", "wan")
        for kind in ("full", "lora")
    ),
]
"""(tiny pipeline, weight update kind) of each run of the suite; SD3, FLUX and Wan (a one-frame video at the default
`num_frames: 1`) are `slow` (Qwen-Image runs always)."""


class TestDiffusersServerContract(ServerContractSuite):
    @pytest.fixture(scope="class", params=BACKENDS)
    @classmethod
    def backend(cls, request) -> ContractBackend:
        model, kind = request.param
        return diffusers_backend(request.getfixturevalue(f"tiny_{model}_path"), kind)
