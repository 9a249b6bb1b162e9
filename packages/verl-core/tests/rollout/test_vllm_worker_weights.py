"""Weight sync of the vLLM family on a CPU: buckets through an RPC that decodes like vLLM's, checked loads, read-back.

The model is a tiny module whose `load_weights` behaves like vLLM's: q/k/v tensors are fused into one `qkv_proj`
parameter (shape asserted, as vLLM's weight loaders do), unknown names are skipped with no error (as vLLM-Omni's
transformers do), and it returns the set of parameter names it wrote. The RPC is `_MsgpackRpc`: it round-trips the
call's keyword arguments through msgpack with no type hints, which is what vLLM 0.26's engine core does to
`collective_rpc` arguments (a tensor argument arrives as a plain list there).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from verl_core.config import RolloutConfig
from verl_core.rollout.errors import WeightSyncError
from verl_core.rollout.framing import TensorSpec
from verl_core.rollout.vllm import vLLMHttpServer
from verl_core.rollout.vllm.worker_extension import VerlWorkerExtension
from verl_core.rollout.vllm.worker_weights import pack_tensors, read_back, unpack_tensors
from verl_core.rollout.weights import WeightUpdate

msgpack = pytest.importorskip("msgpack", reason="msgpack (a Ray dependency) models vLLM's RPC encoding")

D = 8
SHARDS = (("q_proj", 0), ("k_proj", 1), ("v_proj", 2))


class FusedAttention(nn.Module):
    """q/k/v fused into `qkv_proj` on load, like vLLM's `QKVParallelLinear`; unknown names skipped silently."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv_proj = nn.Linear(D, 3 * D)
        self.o_proj = nn.Linear(D, D)
        self.register_buffer("pos_embed", torch.zeros(2, D))  # vLLM-Omni's SD3 loads its `pos_embed` buffer

    def load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> set[str]:
        params = {**dict(self.named_buffers()), **dict(self.named_parameters())}
        loaded: set[str] = set()
        for name, tensor in weights:
            target, rows = name, None
            for shard, i in SHARDS:
                if name.startswith(f"{shard}."):
                    target, rows = name.replace(shard, "qkv_proj"), slice(i * D, (i + 1) * D)
            if target not in params:
                continue  # vLLM-Omni's transformers: "Skipping unexpected weight" at debug level
            dest = params[target].data if rows is None else params[target].data[rows]
            assert dest.shape == tensor.shape, f"shape mismatch {dest.shape} vs {tensor.shape}"  # vLLM asserts
            dest.copy_(tensor)
            loaded.add(target)
        return loaded


def checkpoint(seed: int) -> dict[str, torch.Tensor]:
    """Trainer-named (unfused) tensors of `FusedAttention`."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for shard, _ in SHARDS:
        out[f"{shard}.weight"] = torch.randn(D, D, generator=g)
        out[f"{shard}.bias"] = torch.randn(D, generator=g)
    out["o_proj.weight"] = torch.randn(D, D, generator=g)
    out["o_proj.bias"] = torch.randn(D, generator=g)
    out["pos_embed"] = torch.randn(2, D, generator=g)
    return out


class Worker(VerlWorkerExtension):
    """The worker side: vLLM's worker would supply `model_runner` and `device`."""

    def __init__(self, folder: Path) -> None:
        self.model = FusedAttention()
        self.model.load_weights(list(checkpoint(0).items()))
        self.model_runner = SimpleNamespace(model=self.model, model_config=SimpleNamespace(model=str(folder)))
        self.device = torch.device("cpu")


def _msgpack_round_trip(value: Any) -> Any:
    """What a value looks like after vLLM's engine-core RPC hop: msgpack with no type hints."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False)


class Server(vLLMHttpServer):
    """`vLLMHttpServer` whose `collective_rpc` is one worker behind a msgpack hop (no vLLM, no engine)."""

    def __init__(self, worker: Worker, nest: int = 1) -> None:
        super().__init__(RolloutConfig(model={"path": "/unused"}, name="vllm"))
        self.worker, self.nest = worker, nest

    def _require_backend(self) -> None:
        """No vLLM needed: nothing here builds an engine."""

    async def _rpc(self, method: str, **kwargs: Any) -> Any:
        reply = _msgpack_round_trip(getattr(self.worker, method)(**_msgpack_round_trip(kwargs)))
        for _ in range(self.nest):  # vLLM: a list per worker; vLLM-Omni: per stage, then per worker
            reply = [reply]
        return reply


@pytest.fixture(params=[1, 2], ids=["vllm-replies", "vllm-omni-replies"])
def server(tmp_path: Path, request) -> Server:
    save_file(checkpoint(0), str(tmp_path / "model.safetensors"))
    return Server(Worker(tmp_path), nest=request.param)


def _load(server: Server, tensors: dict[str, torch.Tensor]) -> None:
    manifest = [TensorSpec.of(n, t, error=WeightSyncError) for n, t in tensors.items()]
    update = WeightUpdate(version=1, kind="full", manifest=manifest)
    asyncio.run(server._engine_load_bucket(update, list(tensors.items())))


def test_vllm_bucket_crosses_a_msgpack_rpc_and_reads_back_through_the_fused_loader(server: Server) -> None:
    sent = checkpoint(1)
    before = asyncio.run(server._engine_read_weights(list(sent), "full"))
    assert all(not torch.equal(before[n], t) for n, t in sent.items())
    _load(server, sent)
    served = asyncio.run(server._engine_read_weights(list(sent), "full"))
    assert sorted(served) == sorted(sent)
    assert all(torch.equal(served[n], t) for n, t in sent.items())
    q_rows = server.worker.model.qkv_proj.weight.detach()[:D]
    assert torch.equal(q_rows, sent["q_proj.weight"])  # really fused into the one parameter


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        pytest.param({"not.a.tensor": torch.zeros(2)}, "loaded nothing", id="unknown-name"),
        pytest.param({"k_proj.weight": torch.zeros(D, D, 3)}, "shape mismatch", id="wrong-shape"),
    ],
)
def test_vllm_refused_tensor_is_a_weight_sync_error_naming_it(server: Server, bad, needle) -> None:
    name = next(iter(bad))
    with pytest.raises(WeightSyncError, match=needle) as info:
        _load(server, {**checkpoint(2), **bad})
    assert info.value.field == name and name in str(info.value)
    assert info.value.status_code == 422


def test_read_back_restores_every_parameter_and_reuses_what_it_located(server: Server) -> None:
    model = server.worker.model
    state = {k: v.clone() for k, v in model.state_dict().items()}
    calls = []

    def load(pairs):
        calls.append([n for n, _ in pairs])
        return model.load_weights(pairs)

    shapes = {n: tuple(t.shape) for n, t in checkpoint(0).items()}
    first = read_back(model, load, shapes)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    probes = len(calls)
    second = read_back(model, load, shapes)
    assert all(torch.equal(first[n], second[n]) for n in shapes)
    assert len(calls) - probes == len(shapes)  # only the round-trip loads: the positions were cached
    assert all(torch.equal(first[n], t) for n, t in checkpoint(0).items())


def test_read_back_unknown_name_is_a_key_error(server: Server) -> None:
    model = server.worker.model
    with pytest.raises(KeyError, match="not served"):
        read_back(model, model.load_weights, {"no_such.weight": (D, D)})
    with pytest.raises(KeyError, match="not a tensor of the served checkpoint"):
        asyncio.run(server._engine_read_weights(["no_such.weight"], "full"))


def test_read_back_refuses_a_sharded_or_transforming_loader() -> None:
    model = FusedAttention()
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def half(pairs):  # a tensor-parallel rank: only its half of the rows
        return _write_half(model, pairs)

    def _transposed(pairs):
        return model.load_weights([(n, t.t() if t.dim() == 2 else t) for n, t in pairs])

    with pytest.raises(ValueError, match="transforms it on load"):
        read_back(model, _transposed, {"o_proj.weight": (D, D)})
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())
    with pytest.raises(ValueError, match="tensor_parallel_size=1"):
        read_back(model, half, {"extra.weight": (D, D)})
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())


def _write_half(model: FusedAttention, pairs) -> set[str]:
    for name, tensor in pairs:
        if name == "extra.weight":
            model.o_proj.weight.data[: D // 2].copy_(tensor[: D // 2])
            return {"o_proj.weight"}
    return set()


def test_pack_tensors_round_trip_keeps_order_dtype_and_shape() -> None:
    tensors = [("b.w", torch.randn(3, 5).bfloat16()), ("a.w", torch.arange(7)), ("c", torch.randn(2, 2).t())]
    back = unpack_tensors(_msgpack_round_trip(pack_tensors(tensors)))
    assert [n for n, _ in back] == ["b.w", "a.w", "c"]
    assert all(torch.equal(t, u) and t.dtype == u.dtype for (_, t), (_, u) in zip(tensors, back))


def test_an_error_record_instead_of_an_answer_is_an_engine_error(server: Server, monkeypatch) -> None:
    """vLLM-Omni answers a failed worker call with a record (`{"status": "error", ...}`), not an exception."""
    from verl_core.rollout.errors import EngineError

    monkeypatch.setattr(server.worker, "verl_load_weights", lambda payload: {"status": "error", "error": "boom"})
    with pytest.raises(EngineError, match=r"verl_load_weights failed.*boom"):
        _load(server, checkpoint(3))
