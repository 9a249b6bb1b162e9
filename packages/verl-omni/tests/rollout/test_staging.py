"""`packed_copy` and `staged_to_device`: many host tensors in a few buffers and transfers, values unchanged."""

import pytest
import torch

from verl_omni.rollout.diffusers.staging import _chunks, packed_copy, staged_to_device


def _mixed():
    torch.manual_seed(0)
    return [
        torch.randn(3, 4),
        torch.randn(5).to(torch.bfloat16),
        torch.randn(4, 3).t(),  # not contiguous
        torch.randn(2, 2, 2).to(torch.bfloat16),
        torch.tensor(1.5),  # 0-d
    ]


def test_packed_copy_is_one_buffer_per_dtype_with_the_same_values():
    sources = _mixed()
    copies = packed_copy(sources)
    assert [(c.shape, c.dtype) for c in copies] == [(s.shape, s.dtype) for s in sources]
    assert all(torch.equal(c, s) for c, s in zip(copies, sources))
    storages = {(c.dtype, c.untyped_storage().data_ptr()) for c in copies}
    assert len(storages) == 2  # float32 and bfloat16
    for s in sources:
        s.fill_(9)  # a copy, not a view: the sender may overwrite its buffer
    assert not any(torch.all(c == 9) for c in copies)


def test_chunks_bound_the_bytes_and_keep_order():
    tensors = [torch.empty(n, dtype=torch.uint8) for n in (4, 4, 9, 1, 1, 2)]
    assert list(_chunks(tensors, 8)) == [[0, 1], [2], [3, 4, 5]]  # a tensor over the bound is a chunk alone
    assert list(_chunks([], 8)) == []


def test_staged_to_device_on_the_host_hands_back_the_tensors():
    sources = _mixed()
    chunks = list(staged_to_device(sources, "cpu", pin=False, chunk_bytes=32))
    assert [i for chunk in chunks for i, _ in chunk] == list(range(len(sources)))
    assert all(t is sources[i] for chunk in chunks for i, t in chunk)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("pinned", [False, True])
def test_staged_to_device_moves_values_in_chunks_on_cuda(pinned):
    sources = _mixed()
    if pinned:
        sources = packed_copy(sources, pin=True)
        assert all(s.is_pinned() for s in sources)
    moved = dict(pair for chunk in staged_to_device(sources, "cuda", chunk_bytes=40) for pair in chunk)
    assert sorted(moved) == list(range(len(sources)))
    for i, s in enumerate(sources):
        assert moved[i].device.type == "cuda" and moved[i].dtype == s.dtype and moved[i].shape == s.shape
        assert torch.equal(moved[i].cpu(), s)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_packed_copy_to_pinned_host_keeps_values_after_a_sync():
    sources = [
        torch.randn(5, 3, device="cuda"),
        torch.randn(7, device="cuda").bfloat16(),
        torch.randn(2, device="cuda"),
    ]
    copies = packed_copy(sources, pin=True, device="cpu")
    torch.cuda.synchronize()
    assert all(c.device.type == "cpu" and c.is_pinned() for c in copies)
    assert all(torch.equal(c, s.cpu()) for c, s in zip(copies, sources))
    assert copies[0].untyped_storage().data_ptr() == copies[2].untyped_storage().data_ptr()  # one buffer per dtype
