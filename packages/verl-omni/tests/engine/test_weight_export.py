"""The fast weight export (`verl_omni.engine.weight_export`): same tensors as a plain per-tensor export, a snapshot,
and a reused flat buffer that never aliases a result the caller still holds. CPU (gloo, one rank); GPU cases marked.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from torch import nn

from verl_omni.engine.lora import export_weights
from verl_omni.engine.weight_export import ExportBuffer, _Slot, _staged_copy, export_state

from .export_worker import reference as _reference
from .test_fsdp_engine import _actor, _with_update_keys

LORA = {"lora_rank": 4, "lora_alpha": 8}


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)  # names and order
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        assert torch.equal(got[name], value), name


def _clone(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in tensors.items()}


@pytest.mark.parametrize("dtype", [None, torch.bfloat16, torch.float16], ids=["master", "bf16", "fp16"])
@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_export_equals_reference_bit_exact(make_engine, lora, dtype):
    engine = make_engine(model=LORA if lora else None)
    got = engine.export_weights(dtype=dtype)
    want = _reference(engine.module, lora_only=lora, dtype=dtype)
    assert want and all(t.device.type == "cpu" for t in got.values())
    _assert_same(got, want)


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_export_is_a_snapshot_after_an_optimizer_step(make_engine, qwen_trajectory, lora):
    engine = make_engine(model=LORA if lora else None, actor=_actor(lr=5e-2))
    exported = engine.export_weights()
    before = _clone(exported)
    old = engine.compute_log_prob(qwen_trajectory)["old_log_probs"]
    engine.update_policy(_with_update_keys(qwen_trajectory, old))
    live = _reference(engine.module, lora_only=lora, dtype=None)
    assert any(not torch.equal(live[k], before[k]) for k in before)  # the step did change the weights
    _assert_same(exported, before)


def test_reused_buffer_never_overwrites_a_result_still_held(make_engine, qwen_trajectory):
    engine = make_engine(model=LORA, actor=_actor(lr=5e-2))
    first = engine.export_weights()
    first_values = _clone(first)
    engine.update_policy(_with_update_keys(qwen_trajectory, engine.compute_log_prob(qwen_trajectory)["old_log_probs"]))
    second = engine.export_weights()
    _assert_same(first, first_values)  # the second export went to other memory
    _assert_same(second, _reference(engine.module, lora_only=True, dtype=None))
    assert any(not torch.equal(first[k], second[k]) for k in first)
    assert engine._export_buffer.allocations == 2

    # a derived view of one tensor is enough to keep the buffer out of reuse
    kept = second["transformer_blocks.0.attn.to_q.lora_A.weight"][1:]
    kept_value = kept.clone()
    del first, second
    engine.update_policy(_with_update_keys(qwen_trajectory, engine.compute_log_prob(qwen_trajectory)["old_log_probs"]))
    third = engine.export_weights()
    assert torch.equal(kept, kept_value)
    _assert_same(third, _reference(engine.module, lora_only=True, dtype=None))


def test_buffer_is_reused_once_the_earlier_result_is_dropped(make_engine):
    engine = make_engine(model=LORA)
    first = engine.export_weights(dtype=torch.bfloat16)
    ptr = next(iter(first.values())).data_ptr()
    del first
    second = engine.export_weights(dtype=torch.bfloat16)
    assert next(iter(second.values())).data_ptr() == ptr
    assert engine._export_buffer.allocations == 1
    _assert_same(second, _reference(engine.module, lora_only=True, dtype=torch.bfloat16))


class _Mixed(nn.Module):
    """Parameters of several sizes and dtypes plus an integer buffer: slots of every alignment."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = nn.Parameter(torch.randn(3, 5, generator=g))
        self.b = nn.Parameter(torch.randn(7, generator=g).to(torch.bfloat16))
        self.c = nn.Parameter(torch.randn(40, 33, generator=g))
        self.register_buffer("steps", torch.arange(5, dtype=torch.int64))
        self.empty = nn.Parameter(torch.zeros(0, 4))
        self.scalar = nn.Parameter(torch.tensor(2.5))


@pytest.mark.parametrize("dtype", [None, torch.float16], ids=["keep", "fp16"])
def test_plain_module_mixed_dtypes_and_shared_buffer(dtype):
    module = _Mixed()
    buffer = ExportBuffer()
    got = export_weights(module, lora_only=False, dtype=dtype, buffer=buffer)
    _assert_same(got, _reference(module, lora_only=False, dtype=dtype))
    storage = {t.untyped_storage().data_ptr() for t in got.values()}
    assert len(storage) == 1  # one flat buffer
    with torch.no_grad():
        module.a.add_(1.0)
    assert not torch.equal(got["a"], module.a.to(got["a"].dtype))  # plain CPU params: still a copy


@pytest.mark.parametrize("chunk_bytes", [64, 300, 1 << 20])
def test_staged_copy_chunks_land_at_their_offsets(chunk_bytes):
    """The device-to-host staging (run here with a CPU 'device'): chunk boundaries, a tensor bigger than a chunk."""
    module = _Mixed()
    slots, offset = [], 0
    for name, value in module.state_dict().items():
        nbytes = value.numel() * value.dtype.itemsize
        slots.append(_Slot(name, value, value.dtype, offset, nbytes))
        offset = (offset + nbytes + 63) // 64 * 64
    host = torch.full((offset,), 255, dtype=torch.uint8)
    shapes = [s.value.shape for s in slots]
    _staged_copy(slots, shapes, host, torch.device("cpu"), chunk_bytes)
    for slot, shape in zip(slots, shapes, strict=True):
        got = host[slot.offset : slot.offset + slot.nbytes].view(slot.dtype).view(shape)
        assert torch.equal(got, slot.value), slot.key


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_gpu_export_to_pinned_host_and_same_device(device):
    module = _Mixed().cuda()
    buffer = ExportBuffer()
    got = export_state(module, lora_only=False, adapter_name="default", dtype=torch.bfloat16, device=device,
                       buffer=buffer, chunk_bytes=256)  # fmt: skip
    want = _reference(module, lora_only=False, dtype=torch.bfloat16)
    _assert_same({k: v.cpu() for k, v in got.items()}, want)
    first = next(iter(got.values()))
    assert first.device.type == device and (device == "cuda" or first.is_pinned())


def test_two_ranks_sharded_export_equals_reference_on_every_rank(tiny_qwen_image_path, tmp_path):
    """Two gloo ranks, every weight sharded: each rank's export equals the per-tensor full-tensor reference."""
    worker = pathlib.Path(__file__).with_name("export_worker.py")
    out = tmp_path / "export.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker),
           "--pipeline", str(tiny_qwen_image_path), "--out", str(out)]  # fmt: skip
    dist_vars = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"}
    env = {k: v for k, v in os.environ.items() if k not in dist_vars}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for rank in (0, 1):
        result = torch.load(f"{out}.rank{rank}", weights_only=False)
        assert len(result["checked"]) == 6 and not result["errors"], (rank, result)


def test_state_entries_follow_state_dict_names_order_and_hooks(make_engine):
    from verl_omni.engine.state_entries import state_entries as _state_entries

    module = _Mixed()
    module.register_buffer("scratch", torch.ones(2), persistent=False)  # not in the state dict
    module.child = _Mixed()
    for m in (module, make_engine(model=LORA).module):
        assert [k for k, _ in _state_entries(m)] == list(m.state_dict())

    def rename(mod, state, prefix, local_metadata):  # a post-hook that rewrites the dict: its names win
        state[prefix + "renamed"] = state.pop(prefix + "a")

    module.child._register_state_dict_hook(rename)
    assert list(export_weights(module, lora_only=False)) == list(module.state_dict())
    assert "child.renamed" in export_weights(module, lora_only=False)


def test_state_entries_see_submodules_added_replaced_or_removed_after_the_walk_was_cached():
    from verl_omni.engine.state_entries import state_entries as _state_entries

    module = _Mixed()
    module.child = _Mixed()
    assert [k for k, _ in _state_entries(module)] == list(module.state_dict())  # the walk is cached now
    module.child.extra = torch.nn.Linear(2, 3)  # added below a cached submodule
    assert [k for k, _ in _state_entries(module)] == list(module.state_dict())
    assert "child.extra.weight" in dict(_state_entries(module))
    module.child = torch.nn.Linear(4, 1)  # replaced
    names = [k for k, _ in _state_entries(module)]
    assert names == list(module.state_dict()) and [k for k in names if k.startswith("child.")] == [
        "child.weight", "child.bias"
    ]  # fmt: skip
    del module.child  # removed
    names = [k for k, _ in _state_entries(module)]
    assert names == list(module.state_dict()) and not [k for k in names if k.startswith("child")]
