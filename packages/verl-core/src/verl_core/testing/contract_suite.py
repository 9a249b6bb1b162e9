"""`ServerContractSuite`: the pytest class of the rollout server contract (see `verl_core.testing.server_contract`).

Importing this module imports pytest (the `test` extra); `verl_core.testing.server_contract` imports it only when
`ServerContractSuite` is asked for, so the helpers (`verl_core.testing.contract_backend`) work in a runtime
without pytest.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import socket
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import torch

from verl_core.rollout.client import RolloutClient
from verl_core.rollout.errors import NotReadyError, WeightSyncError
from verl_core.rollout.server import RolloutHttpServer, ServerState
from verl_core.rollout.shm_weights import WeightSegment
from verl_core.testing.contract_backend import ContractBackend, _fields, _with_client, hung_variant, run

__all__ = ["ServerContractSuite"]


class ServerContractSuite:
    """The contract tests; subclass it as `Test<Backend>ServerContract` and provide a `backend` fixture."""

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls) -> ContractBackend:
        """The backend under test (subclasses override this fixture)."""
        raise NotImplementedError("subclasses provide a class-scoped `backend` fixture returning ContractBackend")

    @pytest.fixture(scope="class")
    @classmethod
    def server(cls, backend: ContractBackend) -> Iterator[RolloutHttpServer]:
        """One launched server shared by the class's tests."""
        server = backend.server_cls(backend.config)
        run(server.launch())
        yield server
        run(server.shutdown())

    @pytest.fixture(scope="class")
    @classmethod
    def http(cls, server: RolloutHttpServer) -> Iterator[httpx.Client]:
        """A synchronous HTTP client of `server`."""
        with httpx.Client(base_url=server.address, timeout=60, trust_env=False) as client:
            yield client

    # ---- serving ------------------------------------------------------------------------------

    def test_contract_health_and_readiness(self, server: RolloutHttpServer, http: httpx.Client) -> None:
        """The server binds to loopback and answers /health and /ready."""
        assert urllib.parse.urlparse(server.address).hostname == "127.0.0.1"
        assert http.get("/health").json()["status"] == "ok"
        ready = http.get("/ready")
        assert ready.status_code == 200 and ready.json()["ready"] is True

    def test_contract_generate_http_matches_python(self, backend: ContractBackend, server, http) -> None:
        """Generate over HTTP and in Python give the same output and version."""
        over_http = http.post("/generate", json=backend.request)
        assert over_http.status_code == 200, over_http.text
        body = _fields(over_http)
        assert body["weight_version"] == server.weight_version
        assert body["finish_reason"] in ("stop", "length")
        in_process = run(server.generate(backend.request)).model_dump()
        assert backend.outputs(body) == backend.outputs(in_process)

    def test_contract_concurrent_requests(self, backend: ContractBackend, server) -> None:
        """Concurrent requests all complete with their own ids."""
        reqs = [{**backend.request, "request_id": f"concurrent-{i}"} for i in range(6)]
        responses = run(_with_client(server.address, lambda c: asyncio.gather(*(c.generate(r) for r in reqs))))
        assert sorted(r["request_id"] for r in responses) == [f"concurrent-{i}" for i in range(6)]
        assert all(backend.outputs(r) == backend.outputs(responses[0]) for r in responses)  # same seed

    def test_contract_abort_in_flight(self, backend: ContractBackend, server, http) -> None:
        """Abort stops an in-flight request (reason 'abort'); unknown ids are ignored."""

        async def abort_mid_way() -> tuple[dict[str, Any], list[str]]:
            client = RolloutClient(server.address, timeout_s=60)
            try:
                task = asyncio.ensure_future(client.generate({**backend.long_request, "request_id": "to-abort"}))
                for _ in range(2000):
                    if "to-abort" in server._inflight:
                        break
                    await asyncio.sleep(0.001)
                aborted = await client.abort(["to-abort", "not-in-flight"])
                return await task, aborted
            finally:
                await client.aclose()

        response, aborted = run(abort_mid_way())
        assert aborted == ["to-abort"]
        assert response["finish_reason"] == "abort"
        assert http.post("/generate", json=backend.request).status_code == 200  # still serving

    def test_contract_sleep_wake_round_trip(self, backend: ContractBackend, server, http) -> None:
        """Sleep refuses generates with 503; wake restores the same outputs."""
        before = _fields(http.post("/generate", json=backend.request))
        assert http.post("/sleep", json={}).json()["state"] == ServerState.SLEEPING.value
        assert http.get("/ready").status_code == 503
        asleep = http.post("/generate", json=backend.request)
        assert asleep.status_code == 503 and "wake_up" in asleep.json()["error"]["message"]
        assert http.post("/wake_up", json={}).json()["state"] == ServerState.READY.value
        after = _fields(http.post("/generate", json=backend.request))
        assert backend.outputs(after) == backend.outputs(before)

    def test_contract_update_weights_changes_output_and_version(self, backend: ContractBackend, server, http) -> None:
        """New weights change the output; the version is reported."""
        before = _fields(http.post("/generate", json=backend.request))
        version = server.weight_version + 7
        weights = backend.new_weights(1)
        bucket = max(64, sum(t.numel() * t.element_size() for t in weights.values()) // 5)  # several buckets
        result = run(_with_client(server.address, lambda c: c.update_weights(
            weights, version=version, kind=backend.weight_kind,
            peft_config=backend.peft_config, bucket_bytes=bucket)))  # fmt: skip
        assert result["weight_version"] == version and result["num_buckets"] > 1
        after = _fields(http.post("/generate", json=backend.request))
        assert after["weight_version"] == version
        assert backend.outputs(after) != backend.outputs(before)
        again = run(server.update_weights(backend.new_weights(1), version=version + 1, kind=backend.weight_kind,
                                          peft_config=backend.peft_config))  # fmt: skip
        assert again.weight_version == version + 1
        assert backend.outputs(run(server.generate(backend.request)).model_dump()) == backend.outputs(after)

    @pytest.mark.parametrize("path", ["http", "python", "shm"])
    def test_contract_served_weights_equal_sent(self, backend: ContractBackend, server, path) -> None:
        """After update_weights every served tensor equals the one sent, tensors larger than a bucket included."""
        weights = dict(backend.new_weights({"http": 3, "python": 4, "shm": 5}[path]))
        sizes = {name: t.numel() * t.element_size() for name, t in weights.items()}
        bucket = max(64, max(sizes.values()) // 3)  # the largest tensor travels as >= 3 slices over HTTP
        assert any(size > bucket for size in sizes.values()), "no tensor is larger than a bucket"
        version = server.weight_version + 1
        before = run(server.served_weights(list(weights), kind=backend.weight_kind))
        assert any(not torch.equal(before[n], t.to(before[n].dtype)) for n, t in weights.items())
        if path == "http":
            result = run(_with_client(server.address, lambda c: c.update_weights(
                weights, version=version, kind=backend.weight_kind, peft_config=backend.peft_config,
                bucket_bytes=bucket)))  # fmt: skip
            assert result["num_buckets"] > len([s for s in sizes.values() if s > bucket])
        elif path == "shm":  # the same-host shared-memory segment (`verl_core.rollout.shm_weights`)
            segment = WeightSegment()
            try:
                descriptor = segment.write(weights)
                result = run(_with_client(server.address, lambda c: c.update_weights_shm(
                    descriptor, version=version, kind=backend.weight_kind, peft_config=backend.peft_config,
                    bucket_bytes=bucket)))  # fmt: skip
            finally:
                segment.close()
            assert result["num_buckets"] > len([s for s in sizes.values() if s > bucket])
        else:
            run(server.update_weights(weights, version=version, kind=backend.weight_kind,
                                      peft_config=backend.peft_config, bucket_bytes=bucket))  # fmt: skip
        served = run(server.served_weights(list(weights), kind=backend.weight_kind))
        differ = [n for n, t in weights.items() if not torch.equal(served[n], t.to(served[n].dtype))]
        assert not differ, (
            f"{len(differ)} of {len(weights)} served tensors differ from the sent ones, e.g. {differ[:3]}"
        )
        assert server.weight_version == version

    # ---- bad input ----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("mutate", "status", "names"),
        [
            pytest.param(lambda w: {**w, "not.a.tensor": torch.zeros(2)}, 422, "not.a.tensor", id="unknown-name"),
            pytest.param("wrong-shape", 422, None, id="wrong-shape"),
        ],
    )
    def test_contract_update_weights_rejects_bad_tensors(self, backend, server, http, mutate, status, names) -> None:
        """A wrong tensor name or shape is a 422 naming it; serving goes on."""
        weights = dict(backend.new_weights(2))
        if mutate == "wrong-shape":
            names = next(iter(weights))
            weights[names] = torch.zeros(*weights[names].shape, 3)
        else:
            weights = mutate(weights)
        version = server.weight_version
        with pytest.raises(WeightSyncError, match=re.escape(names)) as info:
            run(_with_client(server.address, lambda c: c.update_weights(
                weights, version=version + 1, kind=backend.weight_kind, peft_config=backend.peft_config)))  # fmt: skip
        assert info.value.status_code == status and info.value.field == names
        assert server.weight_version == version
        assert http.post("/generate", json=backend.request).status_code == 200

    @pytest.mark.parametrize(
        ("body", "status", "needle"),
        [
            pytest.param(b"{not json", 400, "malformed JSON", id="malformed-json"),
            pytest.param({"colour": 1}, 422, "colour", id="unknown-field"),
            pytest.param(b'{"prompt_ids": "abc"}', 422, "prompt_ids", id="wrong-type"),
            pytest.param({"seed": -1}, 422, "seed", id="negative-seed"),
            pytest.param(b"{}", 422, "exactly one", id="no-prompt"),
            pytest.param({"sampling_params": {"no_such_knob": 1}}, 422, "no_such_knob", id="unknown-sampling-param"),
        ],
    )
    def test_contract_bad_generate_request_is_4xx(self, backend, server, http, body, status, needle) -> None:
        """Malformed or invalid generate bodies get a 4xx naming the problem (dicts change the valid request)."""
        if isinstance(body, dict):
            body = json.dumps({**backend.request, **body}).encode()
        response = http.post("/generate", content=body, headers={"content-type": "application/json"})
        assert response.status_code == status, response.text
        assert needle in response.json()["error"]["message"]
        assert http.post("/generate", json=backend.request).status_code == 200

    def test_contract_oversize_request_is_413(self, backend: ContractBackend, server, http) -> None:
        """A body over max_request_bytes is a 413; serving goes on."""
        huge = b'{"prompt": "' + b"a" * (server.config.max_request_bytes + 10) + b'"}'
        response = http.post("/generate", content=huge, headers={"content-type": "application/json"})
        assert response.status_code == 413 and "max_request_bytes" in response.json()["error"]["message"]
        assert http.post("/generate", json=backend.request).status_code == 200

    def test_contract_metrics(self, server, http) -> None:
        """/metrics reports counters, latency percentiles and the weight version."""
        metrics = http.get("/metrics").json()
        assert metrics["counters"].get("generate_length", 0) + metrics["counters"].get("generate_stop", 0) >= 1
        assert metrics["weight_version"] == server.weight_version
        assert metrics["generate_latency_s"]["p50"] > 0

    # ---- faults and shutdown (own servers) ----------------------------------------------------

    def test_contract_hung_engine_times_out(self, backend: ContractBackend) -> None:
        """A hung engine answers 504 within request_timeout_s; health stays up."""
        config = dataclasses.replace(backend.config, request_timeout_s=0.5)
        server = hung_variant(backend.server_cls)(config)
        run(server.launch())
        try:
            with httpx.Client(base_url=server.address, timeout=30, trust_env=False) as http:
                start = time.perf_counter()
                response = http.post("/generate", json=backend.request)
                elapsed = time.perf_counter() - start
                assert response.status_code == 504 and "request_timeout_s" in response.json()["error"]["message"]
                assert elapsed < 10
                assert http.get("/health").status_code == 200  # the server still answers
                assert not server._inflight
        finally:
            run(server.shutdown())

    def test_contract_clean_shutdown(self, backend: ContractBackend) -> None:
        """Shutdown closes the port, later calls raise NotReadyError, repeat is a no-op."""
        server = backend.server_cls(backend.config)
        run(server.launch())
        host, port = urllib.parse.urlparse(server.address).hostname, urllib.parse.urlparse(server.address).port
        run(server.shutdown())
        assert server.state is ServerState.STOPPED
        with pytest.raises(OSError), socket.create_connection((host, port), timeout=2):
            pass
        with pytest.raises(NotReadyError, match="launch"):
            run(server.generate(backend.request))
        run(server.shutdown())  # idempotent
