"""`register_tensor_transport`: tensors cross Ray as raw bytes, arrive bit-exact, owned and writable."""

from __future__ import annotations

import pytest
import torch

from verl_core.ray_tensors import register_tensor_transport, tensor_from_payload, tensor_to_payload

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray]

CASES = {
    "bf16": lambda: torch.randn(3, 5).to(torch.bfloat16),
    "float64 0-dim": lambda: torch.tensor(2.5, dtype=torch.float64),
    "bool": lambda: torch.tensor([True, False, True]),
    "int64 empty": lambda: torch.zeros(0, 4, dtype=torch.int64),
    "uint8 image": lambda: torch.randint(0, 255, (2, 3, 8, 8), dtype=torch.uint8),
    "non-contiguous view": lambda: torch.arange(24.0).view(4, 6).t()[1:, ::2],
    "sparse": lambda: torch.eye(4).to_sparse(),
}


@pytest.fixture(scope="module")
def transport():
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)  # never join another run's Ray
    register_tensor_transport()
    yield
    ray.shutdown()


@pytest.mark.parametrize("name", sorted(CASES))
def test_payload_round_trip_is_bit_exact(name):
    tensor = CASES[name]()
    back = tensor_from_payload(tensor_to_payload(tensor))
    assert back.dtype == tensor.dtype and back.shape == tensor.shape and back.layout == tensor.layout
    dense = (lambda t: t.to_dense()) if tensor.is_sparse else (lambda t: t)
    assert torch.equal(dense(back), dense(tensor))


def test_payload_of_a_view_carries_only_the_view():
    big = torch.zeros(1_000_000)
    payload = tensor_to_payload(big[:10])
    assert payload[-1].nbytes == 40  # torch's pickle would send the whole 4 MB storage


def test_requires_grad_survives():
    leaf = torch.randn(3, requires_grad=True)
    back = tensor_from_payload(tensor_to_payload(leaf))
    assert back.requires_grad and back.is_leaf and torch.equal(back.detach(), leaf.detach())


def test_registration_before_ray_init_is_a_no_op():
    if ray.is_initialized():
        pytest.skip("Ray is running in this process")
    register_tensor_transport()  # must not raise or start Ray
    assert not ray.is_initialized()


def test_through_ray_an_actor_gets_owned_writable_tensors(transport):
    from tensordict import TensorDict

    @ray.remote
    class Echo:
        def __init__(self) -> None:
            register_tensor_transport()

        def add_one_in_place(self, batch):
            for value in batch.values():
                value.add_(1)  # must not write into the object store
            return batch

    batch = TensorDict({"x": torch.randn(64, 1024), "y": torch.arange(64, dtype=torch.int32)}, batch_size=[64])
    ref = ray.put(batch)
    echo = Echo.remote()
    first = ray.get(echo.add_one_in_place.remote(ref))
    second = ray.get(echo.add_one_in_place.remote(ref))
    assert torch.equal(first["x"], batch["x"] + 1) and torch.equal(second["x"], batch["x"] + 1)
    assert torch.equal(second["y"], batch["y"] + 1)
    local = ray.get(ref)  # the driver's own copy from the store is writable and independent too
    local["x"].zero_()
    assert torch.equal(ray.get(ref)["x"], batch["x"])


def test_registered_transport_stores_only_a_views_bytes(transport):
    ref = ray.put(torch.zeros(1_000_000)[:10])  # torch's pickle would store the whole 4 MB storage
    size = ray.experimental.get_object_locations([ref])[ref]["object_size"]
    assert size < 10_000
    assert torch.equal(ray.get(ref), torch.zeros(10))
