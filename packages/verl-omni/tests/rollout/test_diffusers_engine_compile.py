"""`DiffusersRolloutEngine(compile_blocks=True)`: the transformer's repeated blocks run under `torch.compile`.

The compiled engine must sample what the eager one samples, before and after a merged LoRA update (peft swaps the
blocks' linear layers, which recompiles them), and the option must reach the engine from the rollout config.
"""

import pytest
import torch

from verl_omni.pipelines import make_generators
from verl_omni.rollout import DiffusersRolloutEngine
from verl_omni.rollout.diffusers.engine import compile_transformer_blocks

PROMPTS = ["a cat on a red chair"]


def _short(sampling):
    """One image, two steps: a compile costs far more than the sampling it serves."""
    return sampling.evolve(n=1, num_inference_steps=2, sde_window_size=1, sde_window_range=[0, 2])


def _compiled(engine) -> list[bool]:
    return [getattr(b, "_compiled_call_impl", None) is not None for b in engine.transformer.transformer_blocks]


@pytest.mark.parametrize("model", ["qwen_image", "sd3"])  # SD3 lists no `_repeated_blocks`: its block list is used
def test_compile_blocks_wraps_every_block_and_nothing_else(model, request, tiny_sampling_config):
    path = request.getfixturevalue(f"tiny_{model}_path")
    engine = DiffusersRolloutEngine(path, sampling=tiny_sampling_config, compile_blocks=True)
    eager = DiffusersRolloutEngine(path, sampling=tiny_sampling_config)
    assert engine.compiled_blocks == len(engine.transformer.transformer_blocks) > 0
    assert all(_compiled(engine)) and not any(_compiled(eager)) and eager.compiled_blocks == 0
    assert getattr(engine.transformer, "_compiled_call_impl", None) is None  # regional: the root stays eager


def test_compiled_engine_samples_what_the_eager_engine_samples(tiny_qwen_image_path, tiny_sampling_config):
    from verl_omni.testing import random_transformer_lora

    sampling = _short(tiny_sampling_config)
    engines = [DiffusersRolloutEngine(tiny_qwen_image_path, sampling=sampling, compile_blocks=c) for c in (True, False)]
    tensors, config = random_transformer_lora(tiny_qwen_image_path, seed=1, std=0.1)
    outputs = []
    for engine in engines:
        before = engine.generate(PROMPTS, generator=make_generators(0, 1))
        engine.update_weights(tensors, lora_config=config)  # merged: the blocks' linears are peft layers now
        outputs.append((before, engine.generate(PROMPTS, generator=make_generators(0, 1))))
    (compiled_before, compiled_after), (eager_before, eager_after) = outputs
    assert not torch.allclose(eager_after["latents"], eager_before["latents"], atol=1e-3)  # the LoRA changes them
    for got, want in ((compiled_before, eager_before), (compiled_after, eager_after)):
        for key in ("latents", "log_probs"):
            torch.testing.assert_close(got[key], want[key], atol=1e-4, rtol=1e-4)
        assert (got["images"].int() - want["images"].int()).abs().max() <= 1  # uint8 rounding of the decode


def test_a_failing_compile_is_an_error_naming_the_keys_that_turn_it_off(tiny_qwen_image_path, tiny_sampling_config):
    def failing_backend(graph, example_inputs):
        raise ValueError("no compiler for this graph")

    sampling = _short(tiny_sampling_config)
    engine = DiffusersRolloutEngine(tiny_qwen_image_path, sampling=sampling, compile_blocks=True)
    for block in engine.transformer.transformer_blocks:
        block.compile(backend=failing_backend)  # a real dynamo compile whose backend fails
    with pytest.raises(RuntimeError, match=r"enforce_eager=true.*compile_blocks=false") as info:
        engine.generate(PROMPTS, generator=make_generators(0, 1))
    assert "no compiler for this graph" in str(info.value)
    assert isinstance(info.value.__cause__, torch._dynamo.exc.BackendCompilerFailed)


def test_compile_blocks_without_blocks_names_the_option():
    with pytest.raises(ValueError, match=r"engine_kwargs\.diffusers\.compile_blocks: Linear has no repeated blocks"):
        compile_transformer_blocks(torch.nn.Linear(2, 2))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_compiled_engine_on_cuda_follows_lora_updates_across_sleep_and_wake(tiny_qwen_image_path, tiny_sampling_config):
    """bf16 on CUDA: sleep repoints every weight at host memory and wake at fresh device memory, and drops the merged
    weights; the compiled blocks must read the new storage, and a second LoRA update must reach them."""
    from verl_omni.testing import random_transformer_lora

    sampling = tiny_sampling_config.evolve(n=2)
    kwargs = {"sampling": sampling, "device": "cuda", "dtype": torch.bfloat16}
    compiled = DiffusersRolloutEngine(tiny_qwen_image_path, compile_blocks=True, **kwargs)
    eager = DiffusersRolloutEngine(tiny_qwen_image_path, **kwargs)
    first, config = random_transformer_lora(tiny_qwen_image_path, seed=1, std=0.5)
    second, _ = random_transformer_lora(tiny_qwen_image_path, seed=2, std=0.5)
    results = []
    for tensors in (first, second):
        outs = []
        for engine in (compiled, eager):
            engine.sleep()
            engine.update_weights(tensors, lora_config=config)  # written while asleep, merged on wake-up's use
            engine.wake_up()
            outs.append(engine.generate(PROMPTS, generator=make_generators(0, 2))["latents"])
        results.append(outs)
    # bf16 kernels fused differently differ a little; weights left from the other update would differ much more
    for step, (got, want) in enumerate(results):
        error = (got - want).abs().mean()
        stale = (got - results[1 - step][1]).abs().mean()  # distance to what the other update samples (eager)
        assert error < stale / 3, f"update {step}: compiled is {error:.3g} off eager, {stale:.3g} off the other update"
