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
    blocks = engine._blocks(engine.module, engine.fsdp_layer_prefixes)
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


def test_default_fsdp_settings_are_eager_and_resharded_on_the_cpu(
    tiny_qwen_image_path, worker_env, caplog, monkeypatch
):
    # `compile_blocks: null` and `reshard_after_forward: null` (the defaults): no compile, reshard on the CPU
    from tensordict import TensorDict

    worker = _worker(tiny_qwen_image_path, [])
    assert worker.actor_config.fsdp_config.compile_blocks is None
    info = worker.init_engine("127.0.0.1", _free_port(20000, 30000))
    assert info["compiled_blocks"] == 0 and not any(_compiled(worker.engine))
    with caplog.at_level("INFO", logger="verl_omni.trainer.workers"):
        worker._resolve_resharding(TensorDict({}, batch_size=[0]))
        worker._resolve_resharding(TensorDict({}, batch_size=[0]))  # once per rank
    choice = worker.reshard_choices["actor"]
    assert choice.reshard_after_forward is True and "cpu device" in choice.reason
    lines = [r.getMessage() for r in caplog.records if "reshard_after_forward" in r.getMessage()]
    assert lines == ["rank 0 actor engine: reshard_after_forward=true (reshard): cpu device (params are resharded "
                     "on the CPU / gloo)"]  # fmt: skip
    # a "keep" choice (the CUDA rule, stood in) reaches every FSDP unit: no reshard after forward
    from torch.distributed.fsdp import FSDPModule

    from verl_omni.engine.auto_settings import ReshardChoice

    monkeypatch.setattr("verl_omni.trainer.workers._reshard_choice", lambda *a, **k: ReshardChoice(False, "stand-in"))
    worker.reshard_choices = {}
    worker._resolve_resharding(TensorDict({}, batch_size=[0]))
    units = [m for m in worker.engine.module.modules() if isinstance(m, FSDPModule)]
    assert len(units) > 1
    assert all(g.post_forward_mesh_info is None for m in units for g in m._get_fsdp_state()._fsdp_param_groups)


def test_reshard_choice_on_cuda_weighs_model_micro_batch_and_free_memory(tiny_qwen_image_path, monkeypatch):
    """The CUDA branch of the worker's rule with a stand-in engine (no GPU here): the numbers it reads."""
    import types

    import torch
    from tensordict import TensorDict

    from verl_omni.engine.auto_settings import activation_bytes
    from verl_omni.models import adapter_for_folder
    from verl_omni.trainer.workers import _reshard_choice

    adapter = adapter_for_folder(tiny_qwen_image_path)
    engine = types.SimpleNamespace(
        device=torch.device("cuda", 0), module=torch.nn.Linear(4, 4), param_dtype=torch.bfloat16, adapter=adapter,
        model_config=types.SimpleNamespace(enable_gradient_checkpointing=False), world_size=1,
    )  # fmt: skip
    rows = 4
    batch = TensorDict({
        "height": torch.full((rows,), 64), "width": torch.full((rows,), 64),  # 16 image tokens
        "num_inference_steps": torch.full((rows,), 4),
        "guidance_scale": torch.full((rows,), 4.0), "prompt_embeds": torch.zeros(rows, 9, 8),
        "negative_prompt_embeds": torch.zeros(rows, 9, 8), "log_probs": torch.zeros(rows, 2),
    }, batch_size=[rows])  # fmt: skip
    overrides = [f"actor_rollout_ref.model.path={tiny_qwen_image_path}",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]  # fmt: skip
    actor = load_config(overrides, config_name="quickstart").actor_rollout_ref.actor
    act = activation_bytes(adapter.transformer_config, tokens=16 + 9, samples=2 * 2, elem_bytes=2, checkpointing=False)
    need = 20 * 2 + act + 20 * 4  # bf16 gathered Linear(4, 4), activations of 2 images x CFG, fp32 grads
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 * need, 10 * need))
    keep = _reshard_choice(engine, None, batch, actor, trains=True)
    assert keep.reshard_after_forward is False
    assert (keep.gathered_bytes, keep.activation_bytes, keep.grad_bytes, keep.free_bytes) == (40, act, 80, 2 * need)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 * need - 1, 10 * need))
    assert _reshard_choice(engine, None, batch, actor, trains=True).reshard_after_forward is True
    frozen = _reshard_choice(engine, None, batch, actor, trains=False)  # the reference: no activations, no grads
    assert (frozen.activation_bytes, frozen.grad_bytes) == (0, 0)


def test_reshard_choice_reads_the_video_tokens_of_a_wan_batch(tiny_wan_path, monkeypatch):
    """Wan's micro-batch activations come from its video tokens (5 frames: 2 latent frames x 4 x 4 = 32) + text;
    the H200 run resharded "to be safe" because Wan had no token formula."""
    import types

    import torch
    from tensordict import TensorDict

    from verl_omni.engine.auto_settings import activation_bytes
    from verl_omni.models import adapter_for_folder
    from verl_omni.trainer.workers import _reshard_choice

    adapter = adapter_for_folder(tiny_wan_path)
    engine = types.SimpleNamespace(
        device=torch.device("cuda", 0), module=torch.nn.Linear(4, 4), param_dtype=torch.bfloat16, adapter=adapter,
        model_config=types.SimpleNamespace(enable_gradient_checkpointing=False), world_size=1,
    )  # fmt: skip
    rows = 2
    batch = TensorDict({
        "height": torch.full((rows,), 64), "width": torch.full((rows,), 64), "num_frames": torch.full((rows,), 5),
        "num_inference_steps": torch.full((rows,), 4), "guidance_scale": torch.full((rows,), 4.0),
        "prompt_embeds": torch.zeros(rows, 9, 8), "negative_prompt_embeds": torch.zeros(rows, 9, 8),
        "log_probs": torch.zeros(rows, 2),
    }, batch_size=[rows])  # fmt: skip
    overrides = [f"actor_rollout_ref.model.path={tiny_wan_path}", "actor_rollout_ref.rollout.pipeline.num_frames=5",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1"]  # fmt: skip
    actor = load_config(overrides, config_name="quickstart").actor_rollout_ref.actor
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2**40, 2**40))
    choice = _reshard_choice(engine, None, batch, actor, trains=True)
    want = activation_bytes(adapter.transformer_config, tokens=32 + 9, samples=1 * 2, elem_bytes=2,
                            checkpointing=False)  # one video x CFG  # fmt: skip
    assert choice.activation_bytes == want and "unknown" not in choice.reason
    assert choice.reshard_after_forward is False  # a terabyte free: keep the gathered parameters
