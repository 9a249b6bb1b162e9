"""Real-code tier: vLLM-Omni's own `DiffusionLoRAManager` with `VLLMOmniHijack`, on the CPU.

Runs only where vllm-omni and vllm are installed (`nox -s vllm_omni_runtime-0.26` / `-0.30`, nightly); skipped in
the default suite. The pipeline is a small `nn.Module` whose transformer holds vLLM `ReplicatedLinear` layers,
the layers the manager wraps.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm_omni") is None or importlib.util.find_spec("vllm") is None,
    reason="needs vllm-omni and vllm (nox -s vllm_omni_runtime-0.30)",
)

IN, OUT, RANK, ALPHA = 16, 12, 4, 8


@pytest.fixture(scope="module", autouse=True)
def single_rank_vllm():
    """One CPU rank with vLLM's tensor-parallel group (gloo), as a diffusion worker sets it up before layers exist."""
    import socket

    import vllm.lora.lora_model
    from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state

    # a CUDA build of torch without a driver: vLLM would pin the adapter's CPU tensors, which needs the driver
    vllm.lora.lora_model.PIN_MEMORY = False
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        parallel_state.init_distributed_environment(
            world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", local_rank=0, backend="gloo"
        )
        parallel_state.initialize_model_parallel(1, 1)
        yield
        parallel_state.destroy_model_parallel()
        parallel_state.destroy_distributed_environment()


def _linear(n_in: int, n_out: int, seed: int):
    from vllm.model_executor.layers.linear import ReplicatedLinear

    layer = ReplicatedLinear(n_in, n_out, bias=True, return_bias=False, params_dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n_out, n_in, generator=g) / n_in**0.5)
        layer.bias.copy_(torch.randn(n_out, generator=g))
    return layer


class _Block(torch.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.to_q = _linear(IN, OUT, seed)
        self.to_out = _linear(OUT, IN, seed + 1)


class _Transformer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Block(0), _Block(10)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block.to_out(torch.relu(block.to_q(x)))
        return x


class TinyPipeline(torch.nn.Module):
    """A diffusion 'pipeline' with one DiT component, as the manager sees one."""

    def __init__(self) -> None:
        super().__init__()
        self.transformer = _Transformer()


def _adapter(seed: int = 0, modules=("blocks.0.to_q", "blocks.1.to_q")) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name in modules:
        out[f"{name}.lora_A.weight"] = torch.randn(RANK, IN, generator=g)
        out[f"{name}.lora_B.weight"] = torch.randn(OUT, RANK, generator=g)
    return out


PEFT = {"r": RANK, "lora_alpha": ALPHA, "target_modules": ["to_q"], "bias": "none"}


@pytest.fixture
def hijacked():
    from verl_omni.rollout.vllm_omni.lora import VLLMOmniHijack

    route = VLLMOmniHijack.hijack(TinyPipeline)
    yield route
    VLLMOmniHijack.unhijack()


def _manager(pipeline):
    from vllm_omni.diffusion.lora.manager import DiffusionLoRAManager

    return DiffusionLoRAManager(pipeline=pipeline, device=torch.device("cpu"), dtype=torch.float32,
                                max_cached_adapters=2)  # fmt: skip


def _select(manager, int_id: int) -> None:
    from verl_omni.rollout.vllm_omni import compat
    from verl_omni.rollout.vllm_omni.lora import FAKE_LORA_PATH

    manager.set_active_adapter(compat.lora_request(f"a{int_id}", int_id, FAKE_LORA_PATH), 1.0)


def _expected_delta(x: torch.Tensor, tensors: dict[str, torch.Tensor], pipeline: TinyPipeline) -> torch.Tensor:
    """The output of the base network with each block's to_q shifted by (alpha / r) · B A x."""
    h = x
    for i, block in enumerate(pipeline.transformer.blocks):
        a, b = tensors[f"blocks.{i}.to_q.lora_A.weight"], tensors[f"blocks.{i}.to_q.lora_B.weight"]
        base_q = block.to_q.base_layer if hasattr(block.to_q, "base_layer") else block.to_q
        base_out = block.to_out.base_layer if hasattr(block.to_out, "base_layer") else block.to_out
        q = base_q(h) + (h @ a.T @ b.T) * (ALPHA / RANK)
        h = h + base_out(torch.relu(q))
    return h


def test_runtime_route_matches_release(hijacked):
    from verl_omni.rollout.vllm_omni import compat

    runtime = compat.require()
    assert hijacked == ("hook" if compat.minor(runtime.omni) >= (0, 28) else "patch")


def test_runtime_tensor_adapter_changes_output_by_the_lora_delta(hijacked):
    from verl_omni.rollout.vllm_omni.lora import tensor_lora_request

    pipeline = TinyPipeline()
    x = torch.randn(3, IN, generator=torch.Generator().manual_seed(5))
    base = pipeline.transformer(x).detach()
    manager = _manager(pipeline)
    tensors = _adapter()
    sent = {k: v.clone() for k, v in tensors.items()}  # vLLM folds the scaling into lora_B in place
    assert manager.add_adapter(tensor_lora_request("a1", 1, sent, PEFT)) is True
    _select(manager, 1)
    with torch.no_grad():
        out = pipeline.transformer(x)
        want = _expected_delta(x, tensors, pipeline)
    assert not torch.allclose(out, base)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    manager.set_active_adapter(None)  # deactivating restores the base output
    torch.testing.assert_close(pipeline.transformer(x).detach(), base, rtol=1e-6, atol=1e-6)


def test_runtime_second_adapter_replaces_the_first(hijacked):
    from verl_omni.rollout.vllm_omni.lora import tensor_lora_request

    pipeline = TinyPipeline()
    x = torch.randn(2, IN, generator=torch.Generator().manual_seed(6))
    manager = _manager(pipeline)
    manager.add_adapter(tensor_lora_request("a1", 1, _adapter(1), PEFT))
    second = _adapter(2)
    manager.add_adapter(tensor_lora_request("a2", 2, {k: v.clone() for k, v in second.items()}, PEFT))
    manager.remove_adapter(1)
    _select(manager, 2)
    with torch.no_grad():
        torch.testing.assert_close(pipeline.transformer(x), _expected_delta(x, second, pipeline), rtol=1e-5, atol=1e-5)
    assert manager.list_adapters() == [2]


def test_runtime_zero_module_binding_raises(hijacked):
    from verl_omni.rollout.vllm_omni.lora import tensor_lora_request

    manager = _manager(TinyPipeline())
    wrong = _adapter(modules=("blocks.0.attn.query", "blocks.1.attn.query"))  # names the transformer does not have
    with pytest.raises(ValueError, match="binds zero modules"):
        manager.add_adapter(tensor_lora_request("bad", 3, wrong, PEFT))
    assert manager.list_adapters() == []


def test_runtime_partly_bound_adapter_raises(hijacked):
    from verl_omni.rollout.vllm_omni.lora import tensor_lora_request

    manager = _manager(TinyPipeline())
    half = {**_adapter(modules=("blocks.0.to_q",)), **_adapter(modules=("blocks.7.to_q",))}
    with pytest.raises(ValueError, match=r"1 of 2 adapter modules bind no layer.*blocks\.7\.to_q"):
        manager.add_adapter(tensor_lora_request("half", 4, half, PEFT))


def test_runtime_unknown_target_module_raises(hijacked):
    from verl_omni.rollout.vllm_omni.lora import tensor_lora_request

    manager = _manager(TinyPipeline())
    with pytest.raises(ValueError, match=r"target_modules: \['to_qq'\].*to_out"):
        manager.add_adapter(tensor_lora_request("typo", 5, _adapter(), {**PEFT, "target_modules": ["to_qq"]}))


def test_runtime_hijack_is_idempotent_and_unhijack_restores():
    from vllm_omni.diffusion.lora.manager import DiffusionLoRAManager

    from verl_omni.rollout.vllm_omni.lora import VLLMOmniHijack, tensor_lora_request

    original = DiffusionLoRAManager._load_adapter
    first = VLLMOmniHijack.hijack(TinyPipeline)
    patched = DiffusionLoRAManager._load_adapter
    hook = getattr(TinyPipeline, "_load_diffusion_lora_adapter", None)
    assert VLLMOmniHijack.hijack(TinyPipeline) == first  # again: nothing changes
    assert DiffusionLoRAManager._load_adapter is patched
    assert getattr(TinyPipeline, "_load_diffusion_lora_adapter", None) is hook
    assert VLLMOmniHijack.is_hijacked()
    VLLMOmniHijack.unhijack()
    assert not VLLMOmniHijack.is_hijacked()
    assert DiffusionLoRAManager._load_adapter is original
    assert not hasattr(TinyPipeline, "_load_diffusion_lora_adapter")
    VLLMOmniHijack.unhijack()  # no-op
    manager = _manager(TinyPipeline())
    with pytest.raises(Exception, match=r"nonexistent|No such file|not exist|adapter_config"):  # upstream file loader
        manager.add_adapter(tensor_lora_request("a1", 1, _adapter(), PEFT))


def test_runtime_diffusion_output_roundtrip():
    """`compat.build_diffusion_output` builds the installed `DiffusionOutput`; its trajectory reads back."""
    from verl_omni.rollout.vllm_omni import compat

    runtime = compat.require()
    images = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    trajectory = {"latents": torch.randn(2, 3, 4), "log_probs": torch.randn(2, 2), "timesteps": torch.rand(2, 2)}
    out = compat.build_diffusion_output(runtime, images, trajectory)
    if runtime.has("output_envelope"):
        carried = out.output["metadata"]["verl_trajectory"]
        torch.testing.assert_close(out.output["payload"]["image"], images.float() / 127.5 - 1)
    else:
        carried = out.custom_output["verl_trajectory"]
    assert sorted(carried) == sorted(trajectory)
    for key, value in trajectory.items():
        assert torch.equal(carried[key], value), key
    if runtime.has("trajectory_fields"):
        assert torch.equal(out.trajectory_log_probs, trajectory["log_probs"])
