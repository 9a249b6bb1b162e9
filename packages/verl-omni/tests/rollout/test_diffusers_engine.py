"""DiffusersRolloutEngine: generation, full and LoRA weight updates from in-memory tensors."""

import json
import shutil

import pytest
import torch
from diffusers import QwenImageTransformer2DModel, SD3Transformer2DModel
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict

from verl_omni.pipelines import make_generators
from verl_omni.rollout import DiffusersRolloutEngine

PROMPTS = ["a cat on a red chair", "two dogs in the snow"]
LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["to_q", "to_k", "to_v"], "init_lora_weights": "gaussian"}
TRANSFORMER_CLS = {"qwen_image": QwenImageTransformer2DModel, "sd3": SD3Transformer2DModel}


@pytest.fixture(params=["qwen_image", "sd3"])
def model(request):
    return request.param


@pytest.fixture
def engine(model, request, tiny_sampling_config):
    path = request.getfixturevalue(f"tiny_{model}_path")
    return DiffusersRolloutEngine(
        path, sampling=tiny_sampling_config.evolve(sde_window_size=2, sde_window_range=[0, 3])
    )


def _velocity(engine, module, traj):
    adapter = engine.pipeline.adapter
    with torch.no_grad():
        return adapter.velocity(
            module, traj["latents"][:, 0], traj["timesteps"][:, 0], adapter.conditioning(traj),
            guidance_scale=1.0, height=64, width=64,
        )  # fmt: skip


def test_generate_returns_trajectory(engine):
    traj = engine.generate(PROMPTS, generator=make_generators(0, 4))
    assert traj.batch_size == torch.Size([4])
    assert traj["images"].dtype == torch.uint8 and traj["images"].shape == (4, 3, 64, 64)
    assert traj["log_probs"].shape == (4, 2)
    again = engine.generate(PROMPTS, generator=make_generators(0, 4))
    assert torch.equal(traj["latents"], again["latents"])


def test_update_full_weights_from_tensors(model, engine, request, tmp_path):
    from verl_omni.testing import build_tiny_pipeline

    other_path = build_tiny_pipeline(model, tmp_path / "other", seed=123)
    other = TRANSFORMER_CLS[model].from_pretrained(other_path, subfolder="transformer")
    traj = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    before = _velocity(engine, engine.transformer, traj)
    loaded = engine.update_weights({f"transformer.{k}": v for k, v in other.state_dict().items()})
    assert loaded == len(other.state_dict()) and engine.weight_version == 1
    after = _velocity(engine, engine.transformer, traj)
    torch.testing.assert_close(after, _velocity(engine, other, traj), rtol=0, atol=0)
    assert not torch.allclose(before, after)


def test_update_lora_weights_from_tensors(model, engine, request):
    path = request.getfixturevalue(f"tiny_{model}_path")
    trained = TRANSFORMER_CLS[model].from_pretrained(path, subfolder="transformer")
    trained.add_adapter(LoraConfig(**LORA))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in trained.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    lora_sd = get_peft_model_state_dict(trained)
    assert lora_sd and all("lora_" in k for k in lora_sd)
    traj = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    base = _velocity(engine, engine.transformer, traj)
    assert engine.update_weights(lora_sd, lora_config=LORA) == len(lora_sd)
    torch.testing.assert_close(
        _velocity(engine, engine.transformer, traj), _velocity(engine, trained, traj), atol=1e-6, rtol=0
    )
    assert not torch.allclose(base, _velocity(engine, engine.transformer, traj))
    # a second sync replaces the adapter weights in place (zero B = base model again)
    zeros = {k: torch.zeros_like(v) if "lora_B" in k else v for k, v in lora_sd.items()}
    engine.update_weights(zeros, lora_config=LORA)
    torch.testing.assert_close(_velocity(engine, engine.transformer, traj), base, atol=1e-6, rtol=0)
    assert engine.weight_version == 2


def test_update_rejects_unknown_names_shapes_and_empty_lora(engine):
    with pytest.raises(KeyError, match="match no parameter"):
        engine.update_weights({"not_a_layer.weight": torch.zeros(2)})
    name, param = next(iter(engine.transformer.named_parameters()))
    with pytest.raises(ValueError, match="shape"):
        engine.update_weights({name: torch.zeros(*param.shape, 3)})
    with pytest.raises(ValueError, match="target_modules"):
        engine.update_weights({}, lora_config={"r": 2, "target_modules": ["no_such_module"]}, adapter_name="x")


def test_unknown_model_name_lists_registered(tiny_sd3_path, tmp_path):
    folder = tmp_path / "weird"
    shutil.copytree(tiny_sd3_path, folder)
    index = json.loads((folder / "model_index.json").read_text())
    index["_class_name"] = "NoSuchPipeline"
    (folder / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(KeyError, match=r"NoSuchPipeline.*registered: .*qwen_image.*sd3"):
        DiffusersRolloutEngine(folder)


def test_sleep_and_wake_up_keep_results(engine):
    first = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    engine.sleep()
    assert next(engine.transformer.parameters()).device.type == "cpu"
    engine.wake_up()
    again = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert torch.equal(first["latents"], again["latents"])


def test_full_weights_reach_the_base_layers_under_a_lora_adapter(model, engine, tmp_path):
    from verl_omni.testing import build_tiny_pipeline

    engine.update_weights({}, lora_config=LORA)  # gaussian init: lora_B = 0, the adapter is a no-op
    wrapped = [n for n, _ in engine.transformer.named_parameters() if ".base_layer." in n]
    assert wrapped
    other = TRANSFORMER_CLS[model].from_pretrained(
        build_tiny_pipeline(model, tmp_path / "o", seed=7), subfolder="transformer"
    )
    traj = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert engine.update_weights(other.state_dict()) == len(other.state_dict())
    torch.testing.assert_close(
        _velocity(engine, engine.transformer, traj), _velocity(engine, other, traj), atol=1e-6, rtol=0
    )


# ---- LoRA merged into the base weights (merge_lora=True, the default) ----------------------------------------


def _make(model, request, tiny_sampling_config, **kwargs):
    path = request.getfixturevalue(f"tiny_{model}_path")
    sampling = tiny_sampling_config.evolve(sde_window_size=2, sde_window_range=[0, 3])
    return DiffusersRolloutEngine(path, sampling=sampling, **kwargs), path


def _lora(path, seed):
    from verl_omni.testing import random_transformer_lora

    return random_transformer_lora(path, seed=seed, std=0.1)


def _served(engine) -> dict[str, torch.Tensor]:
    """Every tensor the forward uses (merged base weights included), cloned."""
    return {k: v.detach().clone() for k, v in engine.transformer.state_dict().items()}


def _wrapped(engine):
    from peft.tuners.lora import LoraLayer

    return [m for m in engine.transformer.modules() if isinstance(m, LoraLayer)]


def test_merged_generate_equals_unmerged(model, request, tiny_sampling_config):
    merged, path = _make(model, request, tiny_sampling_config)
    plain, _ = _make(model, request, tiny_sampling_config, merge_lora=False)
    tensors, config = _lora(path, seed=1)
    base = merged.generate(PROMPTS[:1], generator=make_generators(0, 2))
    for engine in (merged, plain):
        engine.update_weights(tensors, lora_config=config)
    assert all(m.merged for m in _wrapped(merged)) and not any(m.merged for m in _wrapped(plain))
    a = merged.generate(PROMPTS[:1], generator=make_generators(0, 2))
    b = plain.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert not torch.allclose(a["latents"], base["latents"], atol=1e-3)  # the adapter changes the samples
    for key in ("latents", "log_probs"):
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=0)


def test_successive_lora_updates_merge_from_the_pristine_weights(model, request, tiny_sampling_config):
    engine, path = _make(model, request, tiny_sampling_config)
    fresh, _ = _make(model, request, tiny_sampling_config)
    first, config = _lora(path, seed=1)
    second, _ = _lora(path, seed=2)
    engine.update_weights(first, lora_config=config)
    engine.update_weights(second, lora_config=config)
    fresh.update_weights(second, lora_config=config)
    served, expected = _served(engine), _served(fresh)
    differ = [k for k in expected if not torch.equal(served[k], expected[k])]
    assert not differ, f"{len(differ)} served tensors differ from a freshly merged engine, e.g. {differ[:3]}"
    # and the merged base is W0 + delta of the second adapter
    layer = _wrapped(engine)[0]
    w0 = layer.verl_pristine_weight
    torch.testing.assert_close(layer.base_layer.weight, w0 + layer.get_delta_weight("default"), atol=1e-6, rtol=0)


def test_full_update_under_a_merged_lora_writes_the_pristine_base(model, request, tiny_sampling_config):
    from verl_omni.testing import perturbed_transformer_weights

    engine, path = _make(model, request, tiny_sampling_config)
    tensors, config = _lora(path, seed=1)
    engine.update_weights(tensors, lora_config=config)
    full = perturbed_transformer_weights(path, seed=3)
    engine.update_weights(full)
    table = engine.weight_table(lora=False)
    differ = [n for n, t in full.items() if not torch.equal(table[n], t)]
    assert not differ, f"read-back of {len(differ)} full tensors differs from the sent ones, e.g. {differ[:3]}"
    lora_table = engine.weight_table(lora=True)
    assert all(torch.equal(lora_table[n], t) for n, t in tensors.items())
    # the served model is the new base with the adapter merged in: as an engine given both afresh
    fresh, _ = _make(model, request, tiny_sampling_config, merge_lora=False)
    fresh.update_weights(full)
    fresh.update_weights(tensors, lora_config=config)
    a = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    b = fresh.generate(PROMPTS[:1], generator=make_generators(0, 2))
    torch.testing.assert_close(a["latents"], b["latents"], atol=1e-5, rtol=0)


def test_remove_lora_restores_the_base_weights_bit_exactly(model, request, tiny_sampling_config):
    engine, path = _make(model, request, tiny_sampling_config)
    before = _served(engine)
    engine.update_weights(_lora(path, seed=1)[0], lora_config=_lora(path, seed=1)[1])
    engine.update_weights(_lora(path, seed=2)[0], lora_config=_lora(path, seed=2)[1])
    engine.remove_lora()
    after = {k.replace(".base_layer.", "."): v for k, v in _served(engine).items() if ".lora_" not in k}
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert not [n for n, _ in engine.transformer.named_buffers() if "pristine" in n]


def test_rejected_lora_update_leaves_the_served_weights(model, request, tiny_sampling_config):
    engine, path = _make(model, request, tiny_sampling_config)
    tensors, config = _lora(path, seed=1)
    engine.update_weights(tensors, lora_config=config)
    before = _served(engine)
    other = dict(_lora(path, seed=2)[0])
    with pytest.raises(KeyError, match="match no parameter"):
        engine.update_weights({**other, "not.a.lora_A.weight": torch.zeros(2)}, lora_config=config)
    last = list(other)[-1]  # every earlier tensor would be written before a late shape check
    with pytest.raises(ValueError, match="shape"):
        engine.update_weights({**other, last: torch.zeros(*other[last].shape, 2)}, lora_config=config)
    served = _served(engine)
    assert all(torch.equal(served[k], before[k]) for k in before) and engine.weight_version == 1


def test_sleep_and_wake_up_keep_the_merged_output(model, request, tiny_sampling_config):
    engine, path = _make(model, request, tiny_sampling_config)
    tensors, config = _lora(path, seed=1)
    engine.update_weights(tensors, lora_config=config)
    first = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    engine.sleep()
    pristine = [b for n, b in engine.transformer.named_buffers() if "pristine" in n]
    assert pristine and all(b.device.type == "cpu" for b in pristine)
    engine.wake_up()
    again = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert torch.equal(first["latents"], again["latents"]) and torch.equal(first["log_probs"], again["log_probs"])


def test_bf16_merge_adds_a_float32_delta_and_rounds_once(tiny_sd3_path):
    engine = DiffusersRolloutEngine(tiny_sd3_path, dtype=torch.bfloat16)
    tensors, config = _lora(tiny_sd3_path, seed=1)
    engine.update_weights(tensors, lora_config=config)
    layer = _wrapped(engine)[0]
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    assert a.dtype == b.dtype == torch.float32 and layer.base_layer.weight.dtype == torch.bfloat16
    w0 = layer.verl_pristine_weight
    expected = (w0.float() + (b @ a) * layer.scaling["default"]).to(torch.bfloat16)
    assert torch.equal(layer.base_layer.weight, expected)


# ---- sleep through reused host copies (`HostOffload`; pinned on CUDA, plain host tensors here) ------------------


class _Tied(torch.nn.Module):
    def __init__(self, shared: torch.nn.Parameter) -> None:
        super().__init__()
        self.shared = shared
        self.own = torch.nn.Linear(3, 4)
        self.register_buffer("stat", torch.arange(5.0))
        self.register_buffer("scratch", torch.randn(2, 3).t(), persistent=False)  # non-contiguous strides


def _tied_modules():
    torch.manual_seed(0)
    shared = torch.nn.Parameter(torch.randn(4, 3))
    return [_Tied(shared), _Tied(shared)]


def _tensors(modules):
    return [t for m in modules for t in (*m.parameters(), *m.buffers())]


def test_host_offload_round_trip_keeps_values_sharing_and_buffers():
    from verl_omni.rollout.diffusers.host_offload import HostOffload, module_tensors

    modules = _tied_modules()
    tensors = list(module_tensors(modules))
    assert len(tensors) < len(_tensors(modules))  # the shared parameter is listed once
    values = [t.detach().clone() for t in tensors]
    device_ptrs = {t.data_ptr() for t in tensors}
    offload = HostOffload(pin=False)
    assert offload.offload(modules) == len(tensors)
    for t in _tensors(modules):  # every parameter and buffer now lives in its kept host copy
        assert t.data_ptr() == offload.host_copy(t).data_ptr() and t.data_ptr() not in device_ptrs
    assert offload.offload(modules) == 0  # already offloaded: nothing moves
    assert offload.onload(modules, "cpu") == len(tensors)
    assert modules[0].shared is modules[1].shared  # still one Parameter object
    assert all(torch.equal(t, v) and t.stride() == v.stride() for t, v in zip(tensors, values))
    assert all(t.data_ptr() != offload.host_copy(t).data_ptr() for t in tensors)  # fresh device memory
    assert modules[0].scratch.stride() == (1, 3)


def test_host_offload_reuses_the_host_copies_on_the_next_sleep():
    from verl_omni.rollout.diffusers.host_offload import HostOffload, module_tensors

    modules = _tied_modules()
    offload = HostOffload(pin=False)
    offload.offload(modules)
    first = {id(t): offload.host_copy(t).data_ptr() for t in module_tensors(modules)}
    offload.onload(modules, "cpu")
    with torch.no_grad():
        modules[0].own.weight.add_(1.0)  # a change while awake reaches the reused copy
    changed = modules[0].own.weight.detach().clone()
    offload.offload(modules)
    assert {id(t): t.data_ptr() for t in module_tensors(modules)} == first
    assert torch.equal(modules[0].own.weight, changed)
    assert offload.host_bytes() == sum(t.numel() * t.element_size() for t in module_tensors(modules))


def test_host_offload_moves_tensors_created_while_offloaded_and_drops_stale_copies():
    from verl_omni.rollout.diffusers.host_offload import HostOffload

    modules = _tied_modules()
    offload = HostOffload(pin=False)
    offload.offload(modules)
    gone = modules[0].own
    modules[0].own = torch.nn.Linear(3, 4)  # replaced while offloaded (e.g. an adapter swapped)
    modules[0].register_buffer("late", torch.ones(2))
    assert offload.onload(modules, "cpu") == 1 + 1 + 2 * 2 + 1  # shared + own x2 + stat/scratch x2 + late
    offload.offload(modules)
    assert offload.host_copy(gone.weight) is None and offload.host_copy(modules[0].late) is not None


@pytest.mark.skipif(torch.cuda.is_available(), reason="pinning works with CUDA")
def test_host_offload_without_cuda_raises_before_repointing_anything():
    from verl_omni.rollout.diffusers.host_offload import HostOffload

    modules = _tied_modules()
    ptrs = [t.data_ptr() for t in _tensors(modules)]
    with pytest.raises(RuntimeError):
        HostOffload(pin=True).offload(modules)
    assert [t.data_ptr() for t in _tensors(modules)] == ptrs  # the engine falls back to `.to("cpu")` from here


def test_engine_offload_round_trip_with_a_merged_lora(model, request, tiny_sampling_config):
    from verl_omni.rollout.diffusers.host_offload import HostOffload

    engine, path = _make(model, request, tiny_sampling_config)
    tensors, config = _lora(path, seed=1)
    engine.update_weights(tensors, lora_config=config)
    first = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    modules = engine.offload_modules()
    assert engine.transformer in modules and len(modules) > 1  # text encoder(s) and VAE too
    pristine = [b for n, b in engine.transformer.named_buffers() if "pristine" in n]
    assert pristine
    before = [b.detach().clone() for b in pristine]
    offload = HostOffload(pin=False)
    offload.offload(modules)
    assert all(b.data_ptr() == offload.host_copy(b).data_ptr() for b in pristine)
    offload.onload(modules, "cpu")
    assert all(torch.equal(b, v) for b, v in zip(pristine, before))
    again = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert torch.equal(first["latents"], again["latents"]) and torch.equal(first["log_probs"], again["log_probs"])


def test_engine_lora_update_while_offloaded_is_served_after_onload(model, request, tiny_sampling_config):
    from verl_omni.rollout.diffusers.host_offload import HostOffload

    engine, path = _make(model, request, tiny_sampling_config)
    fresh, _ = _make(model, request, tiny_sampling_config)
    first, config = _lora(path, seed=1)
    second, _ = _lora(path, seed=2)
    engine.update_weights(first, lora_config=config)
    offload = HostOffload(pin=False)
    offload.offload(engine.offload_modules())
    engine.update_weights(second, lora_config=config)  # written into the host copies, merged there
    offload.onload(engine.offload_modules(), "cpu")
    fresh.update_weights(second, lora_config=config)
    served, expected = _served(engine), _served(fresh)
    assert all(torch.equal(served[k], expected[k]) for k in expected)


def test_engine_sleep_and_wake_through_host_copies(model, request, tiny_sampling_config):
    from verl_omni.rollout.diffusers.host_offload import HostOffload

    engine, path = _make(model, request, tiny_sampling_config)
    tensors, config = _lora(path, seed=1)
    engine.update_weights(tensors, lora_config=config)
    first = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    engine._host = HostOffload(pin=False)  # what a CUDA engine holds, without pinning: the same code path
    engine.sleep()
    moved = [t for m in engine.offload_modules() for t in (*m.parameters(), *m.buffers())]
    assert all(t.data_ptr() == engine._host.host_copy(t).data_ptr() for t in moved)
    host_ptrs = [t.data_ptr() for t in moved]
    engine.wake_up()
    assert all(t.data_ptr() != engine._host.host_copy(t).data_ptr() for t in moved)
    again = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert torch.equal(first["latents"], again["latents"]) and torch.equal(first["log_probs"], again["log_probs"])
    engine.sleep()
    assert [t.data_ptr() for t in moved] == host_ptrs


@pytest.mark.skipif(torch.cuda.is_available(), reason="pinning works with CUDA")
def test_engine_sleep_falls_back_to_to_cpu_when_pinning_fails(model, request, tiny_sampling_config, caplog):
    from verl_omni.rollout.diffusers.host_offload import HostOffload

    engine, _ = _make(model, request, tiny_sampling_config)
    first = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    engine._host = HostOffload(pin=True)  # pinning needs CUDA: the first sleep fails to allocate
    with caplog.at_level("WARNING"):
        engine.sleep()
    assert engine._host is None and "pinned host copies failed" in caplog.text
    engine.wake_up()
    again = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert torch.equal(first["latents"], again["latents"])


def test_host_offload_copies_only_what_was_written_since_onload():
    from verl_omni.rollout.diffusers.host_offload import HostOffload, module_tensors

    modules = _tied_modules()
    offload = HostOffload(pin=False)
    offload.offload(modules)
    offload.onload(modules, "cpu")
    mark = {id(t): offload.host_copy(t).fill_(-7.0) for t in module_tensors(modules)}  # poison the host copies
    assert offload.offload(modules) == len(mark) and offload.copied_bytes == 0
    assert all(torch.all(t == -7.0) for t in module_tensors(modules))  # not copied: they hold the poison now
    offload.onload(modules, "cpu")
    with torch.no_grad():
        modules[0].own.weight.copy_(torch.ones(4, 3))  # an in-place write: its version counter moves
    modules[0].own.bias.data.fill_(2.0)  # a write through `.data`: invisible to the version counter ...
    offload.mark_written([modules[0].own.bias])  # ... so the writer says so
    offload.offload(modules)
    assert torch.equal(modules[0].own.weight, torch.ones(4, 3)) and torch.all(modules[0].own.bias == 2.0)
    assert offload.copied_bytes == (12 + 4) * 4
    assert torch.all(modules[1].own.weight == -7.0)  # untouched: still not copied


def test_host_offload_discard_drops_values_and_onload_lists_them():
    from verl_omni.rollout.diffusers.host_offload import HostOffload

    modules = _tied_modules()
    weight = modules[0].own.weight
    offload = HostOffload(pin=False)
    offload.offload(modules, discard=[weight])
    assert offload.copied_bytes == sum(t.numel() * t.element_size() for t in _tensors(modules)) - 12 * 4 * 2
    offload.onload(modules, "cpu")
    assert [id(t) for t in offload.uninitialized] == [id(weight)]
    with torch.no_grad():
        weight.fill_(3.0)  # the caller recomputes it
    offload.offload(modules)  # not discarded this time: its host copy becomes valid again
    offload.onload(modules, "cpu")
    assert offload.uninitialized == [] and torch.all(weight == 3.0)


def test_engine_sleep_drops_merged_lora_weights_and_copies_only_changes(model, request, tiny_sampling_config):
    from verl_omni.rollout.diffusers.host_offload import HostOffload

    engine, path = _make(model, request, tiny_sampling_config)
    fresh, _ = _make(model, request, tiny_sampling_config)
    first, config = _lora(path, seed=1)
    second, _ = _lora(path, seed=2)
    engine.update_weights(first, lora_config=config)
    before = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    engine._host = HostOffload(pin=False)
    engine.sleep()
    engine.wake_up()
    assert engine._host.uninitialized  # the merged weights came back without values ...
    again = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))  # ... and were merged again
    assert torch.equal(before["latents"], again["latents"]) and torch.equal(before["log_probs"], again["log_probs"])
    engine.sleep()
    assert engine._host.copied_bytes == 0  # nothing written since the wake: no copy at all
    engine.update_weights(second, lora_config=config)  # while asleep: into the host copies
    engine.wake_up()
    engine.update_weights(first, lora_config=config)
    engine.update_weights(second, lora_config=config)
    engine.sleep()
    lora_bytes = sum(t.numel() * 4 for t in engine.weight_table(lora=True).values())  # held in fp32
    assert engine._host.copied_bytes == lora_bytes
    engine.wake_up()
    fresh.update_weights(second, lora_config=config)
    served = engine.generate(PROMPTS[:1], generator=make_generators(0, 2))
    expected = fresh.generate(PROMPTS[:1], generator=make_generators(0, 2))
    assert torch.equal(served["latents"], expected["latents"])
