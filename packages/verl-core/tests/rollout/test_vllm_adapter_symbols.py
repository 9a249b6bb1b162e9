"""Static check of every vLLM symbol `verl_core.rollout.vllm` relies on (runs only where vllm imports)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

from verl_core.config import RolloutConfig
from verl_core.rollout.vllm import build_engine_args

vllm = pytest.importorskip("vllm", reason="needs vllm (pip install 'verl-core[vllm]')", exc_type=ImportError)


def test_engine_args_are_async_engine_args_fields():
    from vllm.engine.arg_utils import AsyncEngineArgs

    config = RolloutConfig(model={"path": "/m"}, lora={"rank": 8}, max_model_len=512, max_num_batched_tokens=1024)
    args = build_engine_args(config, worker_extension_cls="pkg.Ext")
    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    assert set(args) <= fields, sorted(set(args) - fields)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("generate", {"prompt", "sampling_params", "request_id", "lora_request"}),
        ("abort", {"request_id"}),
        ("sleep", {"level"}),
        ("wake_up", {"tags"}),
        ("collective_rpc", {"method", "timeout", "kwargs"}),
        ("add_lora", {"lora_request"}),
        ("remove_lora", {"lora_id"}),
        ("reset_prefix_cache", set()),
        ("shutdown", set()),
    ],
)
def test_async_llm_methods_exist(method, params):
    from vllm.v1.engine.async_llm import AsyncLLM

    signature = inspect.signature(getattr(AsyncLLM, method))
    assert params <= set(signature.parameters), (method, signature)


def test_request_and_app_symbols():
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    assert {"lora_name", "lora_int_id", "lora_path"} <= set(inspect.signature(LoRARequest).parameters)
    build_app = _first("build_app", "vllm.entrypoints.launchers.app", "vllm.entrypoints.openai.api_server")
    init_app_state = _first(
        "init_app_state", "vllm.entrypoints.launchers.api_server.app_state", "vllm.entrypoints.openai.api_server"
    )
    assert "args" in inspect.signature(build_app).parameters
    assert {"engine_client", "state", "args"} <= set(inspect.signature(init_app_state).parameters)
    assert TokensPrompt(prompt_token_ids=[1, 2])["prompt_token_ids"] == [1, 2]
    params = SamplingParams(n=1, max_tokens=4, min_tokens=0, repetition_penalty=1.0, stop_token_ids=[], logprobs=0)
    assert params.max_tokens == 4
    assert _first("make_arg_parser", "vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args")


def _first(attr: str, *modules: str):
    """`attr` from the first module (newest location first) that has it, as the adapter looks it up."""
    for name in modules:
        try:
            return getattr(importlib.import_module(name), attr)
        except (ImportError, AttributeError):
            continue
    raise AssertionError(f"{attr} is in none of {modules}")
