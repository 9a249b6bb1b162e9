"""User reward functions from `reward.custom_reward_function`: old per-sample signature, async, batched,
dict results, errors at load time (path, name, signature) and at call time (raise, bad values)."""

from __future__ import annotations

import pytest
import torch

from verl_omni.reward import (
    FunctionScorer,
    RewardBatch,
    RewardConfig,
    RewardFunctionError,
    build_scorer,
    jpeg_compressibility,
    load_reward_function,
)

# a pre-#6200 reward file, exactly as users wrote them for verl's `visual` reward manager
OLD_STYLE = """
    import torch

    def compute_score(data_source, solution_image, ground_truth, extra_info=None, **kwargs):
        assert isinstance(solution_image, torch.Tensor) and solution_image.dtype == torch.uint8
        assert solution_image.shape[0] == 3
        bonus = 1.0 if ground_truth == extra_info["prompt"] else 0.0
        return solution_image.float().mean().item() / 255 + bonus
"""

ASYNC_STYLE = """
    import asyncio

    async def score_async(data_source, solution_image, ground_truth, extra_info, **kwargs):
        await asyncio.sleep(0.01 * (3 - extra_info["index"]))  # finish out of order
        return {"score": solution_image.float().mean().item() / 255, "index": extra_info["index"]}
"""

BATCHED_MARKED = """
    from verl_omni.reward import jpeg_compressibility, batched_reward

    @batched_reward
    def score_batch(data_sources, solution_images, ground_truths, extra_infos, prompts, scale=1.0):
        return (scale * jpeg_compressibility(solution_images)).tolist()
"""

BATCHED_BY_SIGNATURE = """
    def score_batch(data_sources, solution_images, ground_truths, extra_infos, **kwargs):
        n = solution_images.shape[0]
        return {"score": [float(i) for i in range(n)], "where": list(data_sources)}
"""

RAISES = """
    def compute_score(data_source, solution_image, ground_truth, extra_info, **kwargs):
        if extra_info["index"] == 2:
            return 1 / 0
        return 0.5
"""


def _batch(images, n=None):
    n = images.shape[0] if n is None else n
    return RewardBatch(
        images,
        prompts=[f"prompt {i}" for i in range(n)],
        data_sources=["src"] * n,
        ground_truths=["prompt 0"] + [None] * (n - 1),
        extra_infos=[{"index": i} for i in range(n)],
    )


def _scorer(path, name, **kwargs):
    return build_scorer(RewardConfig(custom_reward_function={"path": path, "name": name, **kwargs}))


def test_old_signature_file_runs_unchanged(write_reward_file, make_images):
    images = make_images(1, 2)
    out = _scorer(write_reward_file(OLD_STYLE), "compute_score")(_batch(images))
    want = images.float().mean(dim=(1, 2, 3)) / 255
    want[0] += 1.0  # ground truth equals the prompt, which the function finds in extra_info
    torch.testing.assert_close(out.scores, want)
    assert out.scores.dtype == torch.float32


def test_async_function_keeps_batch_order_and_extras(write_reward_file, make_images):
    images = make_images(2, 2)
    scorer = _scorer(write_reward_file(ASYNC_STYLE), "score_async")
    assert scorer.function.is_async and not scorer.function.batched
    out = scorer(_batch(images))
    torch.testing.assert_close(out.scores, images.float().mean(dim=(1, 2, 3)) / 255)
    assert out.extra == {"index": [0, 1, 2, 3]}
    assert out.metrics() == {"reward/index": 1.5}


def test_batched_function_marked_by_decorator_gets_prompts_and_kwargs(write_reward_file, make_images):
    images = make_images(2, 1)
    scorer = _scorer(write_reward_file(BATCHED_MARKED), "score_batch", reward_kwargs={"scale": 2.0})
    assert scorer.function.batched and scorer.function.accepts_prompts
    torch.testing.assert_close(scorer(_batch(images)).scores, 2 * jpeg_compressibility(images).float())


def test_batched_function_by_signature_returns_a_dict_of_lists(write_reward_file, make_images):
    out = _scorer(write_reward_file(BATCHED_BY_SIGNATURE), "score_batch")(_batch(make_images(1, 2)))
    assert out.scores.tolist() == [0.0, 1.0, 2.0] and out.extra == {"where": ["src"] * 3}


def test_pkg_paths_and_verl_omni_module_aliases(make_images):
    images = make_images(1, 1)
    want = jpeg_compressibility(images).float()
    for path in ("pkg://verl_omni.reward.jpeg", "pkg://verl_omni.utils.reward_score.jpeg_compressibility"):
        torch.testing.assert_close(_scorer(path, "compute_score")(_batch(images)).scores, want)


def test_a_raising_function_names_sample_data_source_and_chains(write_reward_file, make_images):
    scorer = _scorer(write_reward_file(RAISES), "compute_score")
    with pytest.raises(
        RewardFunctionError,
        match=r"compute_score \(.*r\.py\) failed on sample 2 \(data_source "
        r"'src'\): raised ZeroDivisionError: division by zero",
    ) as info:
        scorer(_batch(make_images(2, 2)))
    assert isinstance(info.value.__cause__, ZeroDivisionError) and info.value.index == 2


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("return float('nan')", r"returned a non-finite score nan"),
        ("return 'good'", r"returned 'good'; expected a number or a dict with a 'score'"),
        ("return {'acc': 1.0}", r"returned a dict without 'score' \(keys: acc\)"),
    ],
)
def test_unusable_results_are_errors_never_zero(write_reward_file, make_images, body, match):
    path = write_reward_file(f"def f(data_source, solution_image, ground_truth, extra_info):\n    {body}\n")
    with pytest.raises(RewardFunctionError, match=rf"on sample 0 .*{match}"):
        _scorer(path, "f")(_batch(make_images(1, 0)))


def test_batched_result_of_wrong_length(write_reward_file, make_images):
    path = write_reward_file("def f(data_sources, solution_images, ground_truths, extra_infos):\n    return [1.0]\n")
    with pytest.raises(RewardFunctionError, match=r"returned 1 scores for 2 images"):
        _scorer(path, "f")(_batch(make_images(1, 1)))


def test_load_errors_name_key_and_file(write_reward_file, tmp_path):
    path = write_reward_file(OLD_STYLE)
    with pytest.raises(FileNotFoundError, match=r"reward\.custom_reward_function\.path: no such file: .*missing\.py"):
        load_reward_function(str(tmp_path / "missing.py"), "compute_score")
    with pytest.raises(
        AttributeError,
        match=r"reward\.custom_reward_function\.name 'compute_scor' in .*r\.py: "
        r"no such function; callables found: compute_score",
    ):
        load_reward_function(path, "compute_scor")
    with pytest.raises(ImportError, match=r"cannot import module 'no_such_module_xyz'"):
        load_reward_function("pkg://no_such_module_xyz", "f")
    broken = write_reward_file("import no_such_module_xyz\n", name="broken.py")
    with pytest.raises(ImportError, match=r"importing .*broken\.py raised ModuleNotFoundError") as info:
        load_reward_function(broken, "f")
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_wrong_signatures_are_rejected_at_load(write_reward_file):
    path = write_reward_file(
        """
        def two_args(data_source, solution_str):
            return 0.0

        def needs_model(data_source, solution_image, ground_truth, extra_info, model):
            return 0.0
        """
    )
    with pytest.raises(
        TypeError,
        match=r"'two_args'.*called as compute_score\(data_source, solution_image, "
        r"ground_truth, extra_info, \*\*kwargs\); the function lacks solution_image, ground_truth",
    ):
        load_reward_function(path, "two_args")
    with pytest.raises(TypeError, match=r"required parameters model are never passed"):
        load_reward_function(path, "needs_model")
    fn = load_reward_function(path, "needs_model", reward_kwargs={"model": "m"})
    assert fn.reward_kwargs == {"model": "m"}
    with pytest.raises(TypeError, match=r"reward_kwargs scale are passed but the function takes no such parameter"):
        load_reward_function(path, "needs_model", reward_kwargs={"model": "m", "scale": 1})


def test_function_scorer_runs_inside_a_running_event_loop(write_reward_file, make_images):
    import asyncio

    scorer = FunctionScorer(load_reward_function(write_reward_file(ASYNC_STYLE), "score_async"))

    async def main():
        return scorer(_batch(make_images(1, 1)))

    assert asyncio.run(main()).scores.shape == (2,)
