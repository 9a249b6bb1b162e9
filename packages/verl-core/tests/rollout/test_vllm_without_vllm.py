"""The vLLM family without vllm installed: the install hint and the pure shared logic.

That importing its modules loads no `vllm` is checked in `test_server_imports.py` (one fresh interpreter for all).
"""

from __future__ import annotations

import importlib.util

import pytest

from verl_core.config import RolloutConfig
from verl_core.rollout.vllm import (
    BaseVLLMHttpServer,
    LoRAEntry,
    LoRARequestCache,
    build_engine_args,
    free_port,
    round_up_lora_rank,
    sleep_level_for,
    vLLMHttpServer,
)

HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAS_VLLM, reason="vllm is installed here")
def test_vllm_server_without_vllm_says_how_to_install():
    with pytest.raises(ImportError, match=r'pip install "verl-core\[vllm\]"'):
        vLLMHttpServer(RolloutConfig(model={"path": "/m"}, name="vllm"))


def test_vllm_servers_share_the_base_and_not_llm_logic():
    assert issubclass(vLLMHttpServer, BaseVLLMHttpServer)
    base_methods = set(vars(BaseVLLMHttpServer))
    assert "_engine_generate" not in base_methods and "_validate_sampling_params" not in base_methods


def test_build_engine_args_from_rollout_config():
    config = RolloutConfig(
        model={"path": "/models/q", "dtype": "bfloat16"},
        seed=10,
        tensor_model_parallel_size=2,
        max_model_len=4096,
        lora={"rank": 12, "max_loras": 2},
        engine_kwargs={"vllm": {"enforce_eager": True, "swap_space": 4}, "other": {"x": 1}},
    )
    args = build_engine_args(config, rank=3, worker_extension_cls="pkg.Ext")
    assert args["model"] == args["tokenizer"] == "/models/q"
    assert args["seed"] == 13 and args["tensor_parallel_size"] == 2 and args["max_model_len"] == 4096
    assert args["enable_lora"] and args["max_lora_rank"] == 16 and args["max_loras"] == 2
    assert args["enforce_eager"] is True and args["swap_space"] == 4 and "x" not in args  # overrides win
    assert args["worker_extension_cls"] == "pkg.Ext" and args["enable_sleep_mode"]
    assert "max_num_batched_tokens" not in build_engine_args(RolloutConfig(model={"path": "/m"}))


def test_build_engine_args_rejects_non_mapping_overrides():
    config = RolloutConfig(model={"path": "/m"}, engine_kwargs={"vllm": [1, 2]})
    with pytest.raises(ValueError, match=r"rollout\.engine_kwargs\.vllm: expected a mapping"):
        build_engine_args(config)


@pytest.mark.parametrize(("rank", "expected"), [(1, 1), (2, 8), (8, 8), (33, 64), (300, 320), (512, 512)])
def test_round_up_lora_rank(rank, expected):
    assert round_up_lora_rank(rank) == expected


def test_round_up_lora_rank_too_large_names_key():
    with pytest.raises(ValueError, match=r"rollout\.lora\.rank"):
        round_up_lora_rank(513)


def test_sleep_level_for_lora_over_checkpoint_keeps_weights():
    plain = RolloutConfig(model={"path": "/m"}, sleep_level=2)
    assert sleep_level_for(plain, None) == 2 and sleep_level_for(plain, 1) == 1
    lora = RolloutConfig(model={"path": "/m"}, sleep_level=2, lora={"rank": 8})
    assert sleep_level_for(lora, None) == 1
    dummy = RolloutConfig(model={"path": "/m"}, sleep_level=2, lora={"rank": 8}, load_format="dummy")
    assert sleep_level_for(dummy, None) == 2


def test_lora_cache_fresh_id_per_version_and_eviction():
    cache = LoRARequestCache(max_loras=2)
    ids = [cache.new_id(v) for v in (1, 2, 3)]
    assert [i for i, _ in ids] == [1, 2, 3] and ids[0][1] == "verl-lora-v1-1"
    assert cache.add(LoRAEntry(1, "a", 1, "req1")) == []
    assert cache.add(LoRAEntry(2, "b", 2, "req2")) == []
    evicted = cache.add(LoRAEntry(3, "c", 3, "req3"))
    assert [e.int_id for e in evicted] == [1] and cache.current().request == "req3"
    assert cache.get(2).int_id == 2 and cache.get(1) is None
    again = cache.add(LoRAEntry(4, "d", 3, "req3b"))  # same version re-synced: the old id goes
    assert [e.int_id for e in again] == [3] and cache.get(3).int_id == 4 and len(cache) == 2
    assert len(cache.clear()) == 2 and cache.current() is None
    with pytest.raises(ValueError, match="max_loras"):
        LoRARequestCache(0)


def test_free_port_is_bindable():
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
