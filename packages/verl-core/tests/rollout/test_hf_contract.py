"""The server contract suite run against `HFHttpServer` on a tiny random LLM."""

from __future__ import annotations

import dataclasses

import pytest

from verl_core.config import RolloutConfig
from verl_core.rollout.hf import HFHttpServer
from verl_core.testing.server_contract import ContractBackend, ServerContractSuite
from verl_core.testing.tiny_llm import random_state_dict


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


def lora_weights(path, seed: int):
    """LoRA tensors (peft names) of a random adapter on q_proj/v_proj, and its PEFT config."""
    import torch
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path), config)
    for name, p in model.named_parameters():
        if "lora_" in name:
            torch.nn.init.normal_(p, std=1.0)
    return get_peft_model_state_dict(model), config.to_dict()


class TestHFLoRAServerContract(ServerContractSuite):
    """The same contract with LoRA weight updates (the kind diffusion backends sync)."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, tiny_llm_path) -> ContractBackend:
        backend = hf_backend(tiny_llm_path)
        _, peft_config = lora_weights(tiny_llm_path, seed=0)
        return dataclasses.replace(
            backend,
            weight_kind="lora",
            peft_config=peft_config,
            new_weights=lambda seed: lora_weights(tiny_llm_path, seed=seed)[0],
        )
