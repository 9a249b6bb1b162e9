"""The reward model in the trainer on a local Ray (CPU): a tiny random Qwen2.5-VL on verl-core's HF servers scores the
tiny Qwen-Image's images with the built-in `ocr` reward; colocated (sleeping between phases) or on its own pool; a
server killed mid-step stops the run with exit status 1, naming it."""

from __future__ import annotations

import importlib.util
import logging
import pathlib
import time

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

EXAMPLES = pathlib.Path(__file__).resolve().parents[4] / "examples"


@pytest.fixture(scope="module")
def ocr_data(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_ocr_dataset", EXAMPLES / "ocr" / "make_ocr_dataset.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_dataset(tmp_path_factory.mktemp("ocr"), train_size=2, val_size=1)


@pytest.fixture(scope="module")
def vlm_path(tmp_path_factory):
    from verl_core.testing.tiny_llm import build_tiny_vlm

    return build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))


def _ocr_overrides(ocr_data, vlm_path) -> list[str]:
    return [
        f"data.train_files={ocr_data['train']}",
        f"data.val_files={ocr_data['test']}",
        "data.train_batch_size=2",
        "reward.custom_reward_function.path=pkg://verl_omni.reward.ocr",
        "reward.custom_reward_function.name=compute_score_ocr",
        "+reward.custom_reward_function.reward_kwargs.max_tokens=8",
        "reward.timeout_s=120",
        "reward.reward_model.enable=true",
        f"reward.reward_model.model_path={vlm_path}",
        "reward.reward_model.rollout.dtype=float32",
        "reward.reward_model.rollout.request_timeout_s=60",
        "trainer.total_training_steps=1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
    ]


LIFECYCLE_DELAY_S = 0.3


@pytest.mark.parametrize("stream", [False, True], ids=["batch", "stream"])
def test_colocated_reward_model_scores_a_step_and_sleeps_between_phases(
    ray_session, trainer_run, ocr_data, vlm_path, tmp_path, monkeypatch, caplog, stream
):
    """Also: the reward model's wake-up and sleep (slowed by a known delay here) count in the step's exposed reward
    time in both modes, streaming too (it wakes the reward model before generation and puts it to sleep after the
    last group); streaming with a colocated reward model logs a warning naming both keys."""
    from verl_omni.trainer.reward_model import RewardModelService

    broadcast = RewardModelService._broadcast

    def slow_lifecycle(self, method, what="start-up"):
        if method in ("wake_up", "sleep"):
            time.sleep(LIFECYCLE_DELAY_S)
        return broadcast(self, method, what)

    monkeypatch.setattr(RewardModelService, "_broadcast", slow_lifecycle)
    seen = {}

    def inspect(components):
        seen["metrics"] = components.reward_model.server_metrics()
        seen["endpoint"] = components.reward_model.endpoint

    overrides = [
        *_ocr_overrides(ocr_data, vlm_path),
        "trainer.val_before_train=true",
        f"reward.stream={str(stream).lower()}",
    ]
    with caplog.at_level(logging.WARNING, logger="verl_omni.trainer.components"):
        run = trainer_run(tmp_path, overrides, inspect=inspect)
    assert run.error is None, run.error
    (row,) = run.history
    assert 0.0 <= row["critic/rewards/min"] <= row["critic/rewards/max"] <= 1.0
    (server,) = seen["metrics"].values()  # one actor rank: one colocated reward server
    # 1 validation image, then 2 prompts x n=2 training images, each read once
    assert server["counters"]["chat_completions"] == 5
    # asleep after launch, after the validation reward and after the step's reward: awake only for them
    assert server["counters"]["sleeps"] == 3 and server["state"] == "sleeping"
    assert seen["endpoint"].model_name == str(vlm_path)
    assert row["timing_s/reward_model_wake"] >= LIFECYCLE_DELAY_S
    assert row["timing_s/reward_model_sleep"] >= LIFECYCLE_DELAY_S
    assert row["timing_s/reward_exposed"] >= 2 * LIFECYCLE_DELAY_S  # the step waits for both, streaming or not
    assert row["timing_s/reward"] >= row["timing_s/reward_exposed"]
    warned = [r.getMessage() for r in caplog.records if "reward.stream=true with a colocated" in r.getMessage()]
    assert len(warned) == (1 if stream else 0)
    if stream:
        assert "reward.reward_model.enable_resource_pool" in warned[0]


def test_reward_model_on_its_own_pool_spreads_requests_and_stays_awake(ray_session, trainer_run, ocr_data, vlm_path,
                                                                        tmp_path):  # fmt: skip
    seen = {}
    overrides = [
        *_ocr_overrides(ocr_data, vlm_path),
        "reward.reward_model.enable_resource_pool=true",
        "reward.reward_model.nnodes=1",
        "reward.reward_model.n_gpus_per_node=2",
    ]
    run = trainer_run(tmp_path, overrides, inspect=lambda c: seen.update(metrics=c.reward_model.server_metrics()))
    assert run.error is None, run.error
    servers = seen["metrics"]
    assert sorted(servers) == [0, 1]
    served = [s["counters"].get("chat_completions", 0) for s in servers.values()]
    assert sum(served) == 4 and min(served) >= 1  # the router spreads the step's requests over both
    assert all(s["counters"].get("sleeps", 0) == 0 for s in servers.values())


KILLER = """
    import ray
    from verl_omni.reward.ocr import compute_score_ocr


    async def compute_score(data_source, solution_image, ground_truth, extra_info, reward_router_address, **kwargs):
        # the first call kills reward model server 0 and waits until Ray knows it is dead, then asks the router
        for name in ray.util.list_named_actors():
            if name.startswith("verl_omni_reward_") and name.endswith("_server_0"):
                actor = ray.get_actor(name)
                ray.kill(actor)
                try:
                    ray.get(actor.__ray_ready__.remote(), timeout=60)
                except Exception:
                    pass
        return await compute_score_ocr(data_source, solution_image, ground_truth, extra_info, reward_router_address,
                                       max_tokens=8)
"""


def test_reward_model_server_killed_mid_step_exits_nonzero_naming_it(ray_session, ocr_data, vlm_path, tmp_path,
                                                                      fast_overrides, tiny_qwen_image_path,
                                                                      capsys):  # fmt: skip
    import textwrap

    from verl_omni.trainer.main import EXIT_FAILED, run

    killer = tmp_path / "killer.py"
    killer.write_text(textwrap.dedent(KILLER))
    argv = [
        "--config-name",
        "quickstart",
        f"actor_rollout_ref.model.path={tiny_qwen_image_path}",
        *fast_overrides,
        f"trainer.run_dir={tmp_path / 'run'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        *_ocr_overrides(ocr_data, vlm_path),
        f"reward.custom_reward_function.path={killer}",
        "reward.custom_reward_function.name=compute_score",
        "~reward.custom_reward_function.reward_kwargs.max_tokens",
    ]
    assert run(argv) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "error at step 1: RewardModelError: reward model server rank 0 (Ray actor verl_omni_reward_" in err
    assert "died during the reward of step 1" in err and "unreachable" in err
