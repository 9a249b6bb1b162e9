"""`lora_merge.merge` folds LoRA adapters into the base weights with exactly peft's arithmetic (bit for bit)."""

from __future__ import annotations

import copy

import pytest
import torch

from verl_omni.rollout import lora_merge

TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


def _transformer(path, dtype, adapters=("default",)):
    from diffusers import AutoModel
    from peft import LoraConfig

    model = AutoModel.from_pretrained(str(path), subfolder="transformer").to(dtype)
    for i, name in enumerate(adapters):
        model.add_adapter(LoraConfig(r=4, lora_alpha=8 + 4 * i, target_modules=TARGETS), adapter_name=name)
    if len(adapters) > 1:
        model.set_adapters(list(adapters))
    for name in adapters:
        lora_merge.keep_adapter_fp32(model, name)
    return model


def _randomize_adapters(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)


def _peft_merge(model):
    """The reference: reset every layer to its pristine weights, then peft's own `Linear.merge()`."""
    for layer in lora_merge.wrapped_layers(model).values():
        saved = lora_merge._pristine(layer)
        if not saved:
            for name, param in layer.get_base_layer().named_parameters(recurse=False):
                layer.register_buffer(lora_merge._PRISTINE + name, param.detach().clone(), persistent=False)
        else:
            lora_merge._reset(layer, saved)
        layer.merge()


def _differing(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return [k for k in sa if not torch.equal(sa[k], sb[k])]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("adapters", [("default",), ("default", "second")], ids=["one_adapter", "two_adapters"])
@pytest.mark.parametrize("model_name", ["qwen_image", "sd3"])
def test_merge_is_bit_identical_to_peft_merge_over_successive_updates(request, model_name, dtype, adapters):
    path = request.getfixturevalue(f"tiny_{model_name}_path")
    ours = _transformer(path, dtype, adapters)
    reference = copy.deepcopy(ours)
    for seed in (1, 2):  # the second round merges again from the pristine copies
        for model in (ours, reference):
            _randomize_adapters(model, seed)
        lora_merge.merge(ours)
        _peft_merge(reference)
        differ = _differing(ours, reference)
        assert not differ, f"round {seed}: {len(differ)} tensors differ from peft's merge, e.g. {differ[:3]}"
        layers = lora_merge.wrapped_layers(ours).values()
        assert all(sorted(layer.merged_adapters) == sorted(adapters) for layer in layers)
    # the fast path is the one taken for these plain Linear layers (else this test compares peft with itself)
    layer = next(iter(lora_merge.wrapped_layers(ours).values()))
    assert lora_merge._merge_linear(layer, lora_merge._pristine(layer))


def test_layers_the_fast_path_does_not_cover_go_through_peft(tiny_qwen_image_path):
    model = _transformer(tiny_qwen_image_path, torch.bfloat16)
    _randomize_adapters(model, 3)
    layer = next(iter(lora_merge.wrapped_layers(model).values()))
    for part in (layer.lora_A, layer.lora_B):
        part["default"].to(torch.bfloat16)  # adapter weights not float32: left to peft, which casts its own way
    reference = copy.deepcopy(model)
    for _ in range(2):
        lora_merge.merge(model)
        _peft_merge(reference)
    assert not lora_merge._merge_linear(layer, lora_merge._pristine(layer))
    assert layer.merged and not _differing(model, reference)
