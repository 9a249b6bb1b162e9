"""`VisualRewardManager` on a thread pool: chunking, determinism, errors with step/index, timeouts, registry,
weighted multi-reward."""

from __future__ import annotations

import asyncio

import pytest
import torch

from verl_omni.data import PromptDataset
from verl_omni.reward import (
    REWARD_MANAGERS,
    RewardBatch,
    RewardConfig,
    RewardFunctionError,
    VisualRewardManager,
    build_reward_manager,
    get_reward_manager_class,
    jpeg_compressibility,
)


def _config(**kwargs):
    return RewardConfig(pool="thread", **kwargs)


def _batch(images, source="jpeg_compressibility"):
    n = images.shape[0]
    return RewardBatch(images, [f"p{i}" for i in range(n)], [source] * n, [None] * n, [{"i": i} for i in range(n)])


@pytest.mark.parametrize("num_workers", [1, 3, 8])
def test_scores_match_the_scorer_for_any_number_of_workers(make_images, num_workers):
    images = make_images(3, 4)
    with VisualRewardManager(_config(num_workers=num_workers)) as manager:
        out = manager.score(_batch(images), step=0)
    assert out.scores.dtype == torch.float32
    torch.testing.assert_close(out.scores, jpeg_compressibility(images).float(), rtol=0, atol=0)


def test_records_from_the_quickstart_dataset_are_scored_by_data_source(make_images):
    records = list(PromptDataset.from_files("builtin://quickstart"))[:2]
    images = make_images(1, 1)
    group = [records[0], records[0], records[1], records[1]]  # two groups of n=2, prompt-major
    batch = RewardBatch.from_records(torch.cat([images, images]), group)
    with build_reward_manager(_config(num_workers=2)) as manager:
        manager.check_data_sources(r.data_source for r in records)
        out = manager.score(batch, step=4)
        same = manager.score_records(torch.cat([images, images]), group, step=4)
    assert out.scores.shape == (4,) and batch.prompts[2] == records[1].prompt
    torch.testing.assert_close(same.scores, out.scores)


def test_a_raise_stops_the_step_naming_step_sample_and_data_source(write_reward_file, make_images):
    path = write_reward_file(
        """
        def compute_score(data_source, solution_image, ground_truth, extra_info, **kwargs):
            if extra_info["i"] == 5:
                raise ValueError("bad image")
            return 1.0
        """
    )
    manager = VisualRewardManager(_config(num_workers=3, custom_reward_function={"path": path}))
    with pytest.raises(
        RewardFunctionError,
        match=r"failed at step 7 on sample 5 \(data_source 'ocr'\): raised "
        r"ValueError: bad image",
    ) as info:
        manager.score(_batch(make_images(3, 4), source="ocr"), step=7)  # sample 5 sits in the third chunk
    assert info.value.step == 7 and info.value.index == 5 and isinstance(info.value.__cause__, ValueError)
    manager.close()


def test_a_hung_thread_is_a_timeout_naming_it(write_reward_file, make_images):
    path = write_reward_file(
        """
        import time

        def compute_score(data_source, solution_image, ground_truth, extra_info, **kwargs):
            if extra_info["i"] == 3:
                time.sleep(1.0)
            return 0.0
        """
    )
    manager = VisualRewardManager(_config(num_workers=2, timeout_s=0.2, custom_reward_function={"path": path}))
    with pytest.raises(
        TimeoutError,
        match=r"reward thread 1 \(samples 2\.\.3\) did not finish within 0\.2 s "
        r"\(reward\.timeout_s\)",
    ):
        manager.score(_batch(make_images(2, 2)))


def test_weighted_sum_of_reward_functions(write_reward_file, make_images):
    a = write_reward_file("def f(data_source, solution_image, ground_truth, extra_info):\n    return 1.0\n", "a.py")
    b = write_reward_file(
        "def g(data_source, solution_image, ground_truth, extra_info, offset=0.0):\n"
        "    return {'score': extra_info['i'] + offset, 'seen': 1}\n",
        "b.py",
    )
    config = _config(
        num_workers=2,
        reward_manager={
            "source": "importlib",
            "name": "MultiVisualRewardManager",
            "module": {"path": "pkg://verl_omni.reward_loop.reward_manager"},
        },
        reward_functions={
            "one": {"path": a, "name": "f", "weight": 0.5},
            "idx": {"path": b, "name": "g", "weight": 2.0, "reward_kwargs": {"offset": 1.0}},
        },
    )
    with build_reward_manager(config) as manager:
        out = manager.score(_batch(make_images(2, 1)))
    assert out.scores.tolist() == [0.5 + 2.0 * 1, 0.5 + 2.0 * 2, 0.5 + 2.0 * 3]
    assert out.terms == {"one": [1.0, 1.0, 1.0], "idx": [1.0, 2.0, 3.0]} and out.extra == {"idx/seen": [1, 1, 1]}
    assert out.metrics() == {"reward/one/mean": 1.0, "reward/idx/mean": 2.0, "reward/idx/seen": 1.0}


def test_registry_names_and_the_llm_managers():
    assert {"visual", "VisualRewardManager", "MultiVisualRewardManager"} <= set(REWARD_MANAGERS)
    assert get_reward_manager_class("visual") is VisualRewardManager
    with pytest.raises(
        KeyError,
        match=r"reward\.reward_manager\.name: unknown reward manager 'naive' \(verl's "
        r"`naive` manager scores text",
    ):
        get_reward_manager_class("naive")


def test_bad_reward_file_fails_when_the_manager_is_built(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"reward\.custom_reward_function\.path: no such file"):
        VisualRewardManager(_config(custom_reward_function={"path": str(tmp_path / "gone.py")}))


def test_score_async_and_empty_batch(make_images):
    with VisualRewardManager(_config(num_workers=2)) as manager:
        out = asyncio.run(manager.score_async(_batch(make_images(1, 1)), step=1))
        assert out.scores.shape == (2,)
        assert manager.score(_batch(make_images(0, 0))).scores.shape == (0,)


def test_reward_batch_rejects_float_images_and_length_mismatch(make_images):
    with pytest.raises(ValueError, match=r"images: expected a uint8 tensor"):
        _batch(make_images(1, 0).float())
    with pytest.raises(ValueError, match=r"prompts: expected 2 entries"):
        RewardBatch(make_images(1, 1), ["p"], ["s", "s"], [None, None], [{}, {}])
