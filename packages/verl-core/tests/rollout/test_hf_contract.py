"""The server contract suite run against `HFHttpServer` on a tiny random LLM."""

from __future__ import annotations

import dataclasses

import pytest

from verl_core.config import RolloutConfig
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.server_contract import ContractBackend, ServerContractSuite
from verl_core.testing.tiny_llm import random_lora, random_state_dict


def hf_backend(path, **overrides) -> ContractBackend:
    config = RolloutConfig(model={"path": str(path)}, device="cpu", request_timeout_s=30, **overrides)
    return ContractBackend(
        server_cls=HFHttpServer,
        config=config,
        request={"prompt": "the man said that", "seed": 7, "sampling_params": {"max_tokens": 8, "temperature": 1.0}},
        long_request={"prompt_ids": [4, 5], "sampling_params": {"max_tokens": 500, "ignore_eos": True}},
        new_weights=lambda seed: random_state_dict(path, seed=seed),
    )


class TestHFServerContract(ServerContractSuite):
    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_llm_path) -> ContractBackend:
        return hf_backend(tiny_llm_path)


class TestHFLoRAServerContract(ServerContractSuite):
    """The same contract with LoRA weight updates (the kind diffusion backends sync)."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_llm_path) -> ContractBackend:
        backend = hf_backend(tiny_llm_path)
        _, peft_config = random_lora(tiny_llm_path, seed=0)
        return dataclasses.replace(
            backend,
            weight_kind="lora",
            peft_config=peft_config,
            new_weights=lambda seed: random_lora(tiny_llm_path, seed=seed)[0],
        )
