"""`actor_rollout_ref.{actor,ref}.fsdp_config.compile_blocks` reaches the engines an `ActorWorker` builds.

The worker runs in this process (no Ray): `init_engine` joins a world of one (gloo) and builds the engine(s) from
the composed config; `nn.Module.compile` wraps a block's forward lazily, so nothing is compiled until a forward.
"""

from __future__ import annotations

import pytest

from verl_omni.trainer.config import load_config
from verl_omni.trainer.workers import ActorWorker, _free_port


@pytest.fixture
def worker_env(monkeypatch):
    """`init_engine` writes RANK / WORLD_SIZE / ... into os.environ; restore them after the test."""
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "0")
        monkeypatch.delenv(key)


def _worker(path, overrides: list[str], *, with_ref: bool = False) -> ActorWorker:
    config = load_config([f"actor_rollout_ref.model.path={path}", *overrides], config_name="quickstart")
    arr = config.actor_rollout_ref
    return ActorWorker(arr.model, arr.actor, arr.ref if with_ref else None, rank=0, world_size=1, device="cpu")


def _compiled(engine) -> list[bool]:
    blocks = engine._blocks(engine.module, engine.model_config.fsdp_layer_prefixes)
    return [getattr(block, "_compiled_call_impl", None) is not None for block in blocks]


@pytest.mark.parametrize("flag", [True, False])
def test_actor_compile_blocks_compiles_every_block_of_the_actor_engine(tiny_qwen_image_path, worker_env, flag):
    worker = _worker(tiny_qwen_image_path, [f"actor_rollout_ref.actor.fsdp_config.compile_blocks={flag}"])
    info = worker.init_engine("127.0.0.1", _free_port(20000, 30000))
    compiled = _compiled(worker.engine)
    assert len(compiled) == info["num_sharded_blocks"] > 0
    assert compiled == [flag] * len(compiled)
    assert info["compiled_blocks"] == (len(compiled) if flag else 0)


def test_ref_compile_blocks_compiles_the_frozen_reference_engine(tiny_qwen_image_path, worker_env):
    # full fine-tuning with KL: a separate forward-only reference engine, configured by ref.fsdp_config
    worker = _worker(
        tiny_qwen_image_path,
        [
            "actor_rollout_ref.model.lora_rank=0",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.ref.fsdp_config.compile_blocks=true",
        ],
        with_ref=True,
    )
    worker.init_engine("127.0.0.1", _free_port(20000, 30000))
    assert worker.ref_engine is not None and all(_compiled(worker.ref_engine))
    assert not any(_compiled(worker.engine))  # the actor's own key is still false
