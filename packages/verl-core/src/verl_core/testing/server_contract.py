"""The rollout server contract: a pytest suite every `RolloutHttpServer` backend must pass, and its helpers.

The helpers (`run`, `ContractBackend`, `canonical`, `hung_variant`) need no pytest: they live in
`verl_core.testing.contract_backend` and are re-exported here. `ServerContractSuite` lives in
`verl_core.testing.contract_suite` and is imported from here (with pytest) only when it is asked for.

Use it by subclassing `ServerContractSuite` in a test module (the subclass name must start with `Test`)
and providing a class-scoped `backend` fixture that returns a `ContractBackend`::

    class TestHFServerContract(ServerContractSuite):
        @pytest.fixture(scope="class")
        def backend(self, tmp_path_factory):
            return ContractBackend(server_cls=HFHttpServer, config=..., request=..., new_weights=...)

The suite covers: health/readiness, generate over HTTP and in Python (JSON or binary tensor answers alike),
determinism for a seed, concurrent requests, abort, sleep/wake round trip, update_weights changing the output
and the reported weight version, every served tensor equal to the one sent after a full or LoRA update (tensors
larger than a bucket included; read back through `RolloutHttpServer.served_weights`), bad input answered with a
4xx naming the problem (the server keeps serving), a hung engine answered with a 504 within the configured time,
and a clean shutdown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verl_core.testing.contract_backend import ContractBackend, canonical, hung_variant, run

if TYPE_CHECKING:
    from verl_core.testing.contract_suite import ServerContractSuite

__all__ = ["ContractBackend", "ServerContractSuite", "canonical", "hung_variant", "run"]


def __getattr__(name: str) -> Any:
    """`ServerContractSuite` is built with pytest, so it is imported (with pytest) only when asked for."""
    if name == "ServerContractSuite":
        try:
            from verl_core.testing.contract_suite import ServerContractSuite
        except ModuleNotFoundError as e:
            if e.name != "pytest":
                raise
            raise ModuleNotFoundError(
                'ServerContractSuite needs pytest: install the test extra (`pip install "verl-core[test]"`)',
                name="pytest",
            ) from e
        return ServerContractSuite
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
