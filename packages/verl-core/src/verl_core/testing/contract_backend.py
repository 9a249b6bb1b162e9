"""Helpers of the rollout server contract that need no pytest: `ContractBackend`, `run`, `canonical`, `hung_variant`.

`verl_core.testing.server_contract` re-exports them (their public path) beside `ServerContractSuite`; the suite
(`verl_core.testing.contract_suite`) imports them from here, so neither of the two imports the other.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx
import torch
from tensordict import TensorDictBase

from verl_core.config.rollout import RolloutConfig
from verl_core.rollout.client import RolloutClient
from verl_core.rollout.protocol import GenerateRequest
from verl_core.rollout.server import RolloutHttpServer
from verl_core.rollout.tensor_payload import response_fields

__all__ = ["ContractBackend", "canonical", "hung_variant", "run"]


_VOLATILE = {"request_id", "latency_s", "weight_version", "server_rank"}


def run(coro: Any) -> Any:
    """Run a coroutine to completion from synchronous test code."""
    return asyncio.run(coro)


@dataclasses.dataclass
class ContractBackend:
    """What the contract suite needs to know about a backend.

    Args:
        server_cls (`type[RolloutHttpServer]`): the server class under test.
        config (`RolloutConfig`): a config that launches it on this machine (port 0).
        request (`dict`): a valid generate request with a fixed `seed`; its output must depend on the weights.
        new_weights (`Callable[[int], Mapping[str, torch.Tensor]]`): weights for a seed, different from the
            served ones (full model tensors, or LoRA tensors when `weight_kind == "lora"`).
        long_request (`dict`): a request that runs long enough (>= ~0.2 s) to be aborted mid-way.
        weight_kind (`str`, *optional*, defaults to `"full"`): kind of `new_weights`.
        peft_config (`dict`, *optional*): PEFT config sent with LoRA weights.
        outputs_of (`Callable[[dict], Any]`, *optional*): the part of a response that compares equal for equal
            generations (defaults to `canonical` of the response without id, latency and weight version).
    """

    server_cls: type[RolloutHttpServer]
    config: RolloutConfig
    request: dict[str, Any]
    new_weights: Callable[[int], Mapping[str, torch.Tensor]]
    long_request: dict[str, Any]
    weight_kind: str = "full"
    peft_config: dict[str, Any] | None = None
    outputs_of: Callable[[dict[str, Any]], Any] | None = None

    def outputs(self, response: Mapping[str, Any]) -> Any:
        """The comparable part of a response."""
        if self.outputs_of is not None:
            return self.outputs_of(dict(response))
        return canonical({k: v for k, v in response.items() if k not in _VOLATILE})


def canonical(value: Any) -> Any:
    """A form of a response value that compares with `==` bit for bit (tensors and TensorDicts included)."""
    if isinstance(value, torch.Tensor):
        data = value.detach().to("cpu").contiguous().reshape(-1)
        raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
        return ("tensor", str(value.dtype), tuple(value.shape), raw)
    if isinstance(value, TensorDictBase):
        items = {k: canonical(v) for k, v in value.items()}
        return ("tensordict", tuple(value.batch_size), items)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def _fields(response: httpx.Response) -> dict[str, Any]:
    """The fields of a /generate answer (binary tensor body or JSON)."""
    return response_fields(response.content, response.headers.get("content-type"))


def hung_variant(server_cls: type[RolloutHttpServer]) -> type[RolloutHttpServer]:
    """A subclass of `server_cls` whose engine never answers a generate (for the timeout contract)."""

    class HungEngine(server_cls):  # type: ignore[valid-type, misc]
        async def _engine_generate(self, request_id: str, request: GenerateRequest, params: Any) -> dict[str, Any]:
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

    HungEngine.__name__ = f"Hung{server_cls.__name__}"
    return HungEngine


async def _with_client(address: str, call: Callable[[RolloutClient], Awaitable[Any]]) -> Any:
    client = RolloutClient(address, timeout_s=60)
    try:
        return await call(client)
    finally:
        await client.aclose()
