"""`lora_merge.merge` folds LoRA adapters into the base weights with exactly peft's arithmetic (bit for bit)."""

from __future__ import annotations

import copy

import pytest
import torch

from verl_omni.rollout.lora import merge as lora_merge

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
    assert len(lora_merge.MergePlan([layer])._plain) == 1


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
    assert not lora_merge.MergePlan([layer])._plain
    assert layer.merged and not _differing(model, reference)


# ---- the CUDA kernel -----------------------------------------------------------------------------


def test_kernel_supports_only_cuda_tensors_of_matching_shapes():
    from verl_omni.rollout.lora import kernel as lora_kernel

    w = torch.zeros(6, 5, dtype=torch.bfloat16)
    assert not lora_kernel.supports(w, w.clone(), torch.zeros(6, 2), torch.zeros(2, 5))  # on the CPU


def _within_rounding(got, want, w0, lora_b, lora_a, scale) -> tuple[bool, float]:
    """|got - want| <= 2 eps (|W0| + |B| @ |A| scale): both round the same terms, in another summation order.

    Returns (every element within, fraction of elements that differ at all).
    """
    terms = w0.float().abs() + (lora_b.abs() @ lora_a.abs()) * abs(scale)
    bound = 2 * torch.finfo(want.dtype).eps * terms
    diff = (got.float() - want.float()).abs()
    return bool((diff <= bound).all()), float((diff > 0).float().mean())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("shape", [(70, 33, 4), (128, 200, 80), (3, 5, 1), (256, 3072, 64)])
def test_kernel_merge_equals_the_torch_merge_up_to_the_summation_order(shape, dtype):
    from verl_omni.rollout.lora import kernel as lora_kernel

    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    w0 = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
    lora_b = torch.randn(m, k, device="cuda", generator=gen) * 0.05
    lora_a = torch.randn(k, n, device="cuda", generator=gen) * 0.05
    for scale in (2.0, 0.37):  # a power of two (the torch path scales A) and not
        want = torch.empty_like(w0)
        torch.add(w0, lora_merge._delta(lora_b, lora_a, scale), out=want)
        assert lora_kernel.supports(want, w0, lora_b, lora_a)
        got = torch.full_like(w0, float("nan"))
        lora_kernel.merge_many([(got, w0, lora_b, lora_a, scale)])
        within, differing = _within_rounding(got, want, w0, lora_b, lora_a, scale)
        assert within, (scale, float((got.float() - want.float()).abs().max()))
        if dtype != torch.float32:  # a 16-bit result differs only where the float32 sum crosses a rounding boundary
            assert differing <= 1e-3, (scale, differing)
    assert not lora_kernel.supports(want.t(), w0.t(), lora_a.t(), lora_b.t())  # rows not contiguous


@pytest.mark.gpu
def test_one_launch_per_layout_equals_one_launch_per_layer():
    from verl_omni.rollout.lora import kernel as lora_kernel

    gen = torch.Generator(device="cuda").manual_seed(1)
    jobs = []
    for m, n, k, dtype in [(96, 64, 8, torch.bfloat16)] * 3 + [
        (64, 200, 8, torch.bfloat16),
        (96, 64, 8, torch.float16),
    ]:
        w0 = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
        factors = torch.randn(m, k, device="cuda", generator=gen), torch.randn(k, n, device="cuda", generator=gen)
        jobs.append((torch.empty_like(w0), w0, *factors, 0.5 + len(jobs)))  # a scale per layer
    lora_kernel.merge_many(jobs)  # three launches: the three layouts
    for out, w0, lora_b, lora_a, scale in jobs:
        alone = torch.empty_like(out)
        lora_kernel.merge_many([(alone, w0, lora_b, lora_a, scale)])
        assert torch.equal(out, alone)


@pytest.mark.gpu
def test_merge_with_the_kernel_matches_peft_on_a_gpu_transformer(tiny_qwen_image_path):
    ours = _transformer(tiny_qwen_image_path, torch.bfloat16).cuda()
    _randomize_adapters(ours, 4)
    reference = copy.deepcopy(ours)
    lora_merge.merge(ours)  # the kernel for every plain layer
    _peft_merge(reference)
    for layer, ref in zip(lora_merge.wrapped_layers(ours).values(), lora_merge.wrapped_layers(reference).values()):
        a = layer.active_adapters[0]
        w0 = lora_merge._pristine(layer)["weight"]
        lora_b, lora_a = layer.lora_B[a].weight, layer.lora_A[a].weight
        got, want = layer.get_base_layer().weight, ref.get_base_layer().weight
        within, differing = _within_rounding(got, want, w0, lora_b, lora_a, layer.scaling[a])
        assert within and differing <= 1e-3
    lora_merge.merge(ours, kernel=False)  # torch ops: peft's arithmetic, bit for bit, on the GPU too
    assert not _differing(ours, reference)
    layer = next(iter(lora_merge.wrapped_layers(ours).values()))
    assert _kernel_runs_for(layer)


def _kernel_runs_for(layer) -> bool:
    """The kernel path runs for `layer` (float32 adapters on CUDA): `supports` says yes for its tensors."""
    from verl_omni.rollout.lora import kernel as lora_kernel

    a = layer.active_adapters[0]
    weight, saved = layer.get_base_layer().weight.data, lora_merge._pristine(layer)["weight"]
    return lora_kernel.supports(weight, saved, layer.lora_B[a].weight, layer.lora_A[a].weight)
