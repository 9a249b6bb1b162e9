"""Tests for `verl_omni.engine.lora.adapters_disabled` on the tiny Qwen-Image transformer with a real peft LoRA."""

from __future__ import annotations

import pytest
import torch

from verl_omni.config import DiffusionModelConfig
from verl_omni.engine.lora import adapters_disabled, apply_lora


@pytest.fixture
def scorer(tiny_qwen_image_path, qwen_trajectory):
    """`score(module)`: the log-probs of window step 0 of the engine trajectory under `module` (fp32, no grad)."""
    from verl_omni.models import adapter_for_folder

    adapter = adapter_for_folder(tiny_qwen_image_path)
    scheduler = adapter.build_scheduler()

    def score(module):
        with torch.no_grad():
            return adapter.score_step(module, scheduler, qwen_trajectory, 0).log_prob

    return score


def _transformer(path, *, lora: bool):
    from diffusers import AutoModel

    module = AutoModel.from_pretrained(str(path), subfolder="transformer")
    if lora:  # lora_init_weights=False: random lora_B, so the adapter changes the output
        apply_lora(module, DiffusionModelConfig(path=str(path), lora_rank=4, lora_alpha=8, lora_init_weights=False))
    return module


def _flags(module):
    return {n: p.requires_grad for n, p in module.named_parameters()}


def test_adapters_disabled_is_the_base_model_and_keeps_requires_grad(tiny_qwen_image_path, scorer):
    plain = _transformer(tiny_qwen_image_path, lora=False)
    module = _transformer(tiny_qwen_image_path, lora=True)
    flags = _flags(module)
    assert any(flags.values())
    with_lora = scorer(module)
    assert not torch.equal(with_lora, scorer(plain))
    with adapters_disabled(module):
        assert _flags(module) == flags  # FSDP2 reads requires_grad at its first forward: never touched
        torch.testing.assert_close(scorer(module), scorer(plain), rtol=0, atol=0)
    assert _flags(module) == flags
    torch.testing.assert_close(scorer(module), with_lora, rtol=0, atol=0)


def test_adapters_disabled_restores_what_it_found_also_on_error(tiny_qwen_image_path, scorer):
    module = _transformer(tiny_qwen_image_path, lora=True)
    flags = _flags(module)
    with_lora = scorer(module)
    with pytest.raises(RuntimeError, match="boom"), adapters_disabled(module):
        raise RuntimeError("boom")
    assert _flags(module) == flags
    torch.testing.assert_close(scorer(module), with_lora, rtol=0, atol=0)

    module.disable_adapters()  # already off (peft also freezes the adapters): stays off, flags as they were
    frozen = _flags(module)
    with adapters_disabled(module):
        pass
    assert _flags(module) == frozen
    assert not torch.equal(scorer(module), with_lora)


def test_adapters_disabled_rejects_modules_without_or_with_merged_adapters(tiny_qwen_image_path):
    plain = _transformer(tiny_qwen_image_path, lora=False)
    no_layer = r"adapters_disabled: QwenImageTransformer2DModel has no peft adapter layer"
    with pytest.raises(ValueError, match=no_layer), adapters_disabled(plain):
        pass
    module = _transformer(tiny_qwen_image_path, lora=True)
    module.transformer_blocks[0].attn.to_q.merge()
    merged = r"adapters are merged into the base weights of \['transformer_blocks\.0"
    with pytest.raises(ValueError, match=merged), adapters_disabled(module):
        pass
