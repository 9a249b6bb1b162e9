"""Built-in scorers routed by `data_source` on real images (smooth vs noise)."""

from __future__ import annotations

import pytest
import torch

from verl_omni.reward import (
    BuiltinScorer,
    RewardBatch,
    RewardFunctionError,
    check_builtin_data_sources,
    default_compute_score_image,
    default_compute_score_image_batch,
    jpeg_compressibility,
)


def _batch(images, sources):
    n = len(sources)
    return RewardBatch(images, ["p"] * n, sources, [None] * n, [{}] * n)


def test_smooth_image_is_more_compressible_than_noise(make_images):
    smooth, noise = make_images()
    s = default_compute_score_image("jpeg_compressibility", smooth, ground_truth="")
    n = default_compute_score_image("jpeg_compressibility", noise, ground_truth="")
    assert isinstance(s, float) and s > n
    assert default_compute_score_image("jpeg_incompressibility", noise, None) > default_compute_score_image(
        "jpeg_incompressibility", smooth, None
    )


def test_builtin_scorer_routes_each_image_by_data_source(make_images):
    images = make_images(2, 2)
    sources = ["jpeg_compressibility", "jpeg_incompressibility", "jpeg_compressibility", "jpeg_incompressibility"]
    out = BuiltinScorer()(_batch(images, sources))
    assert out.scores.dtype == torch.float32 and out.scores.shape == (4,)
    comp = jpeg_compressibility(images).to(torch.float32)
    torch.testing.assert_close(out.scores[[0, 2]], comp[[0, 2]])
    torch.testing.assert_close(out.scores[[1, 3]], (-500 * comp[[1, 3]]))
    torch.testing.assert_close(default_compute_score_image_batch(sources, images).to(torch.float32), out.scores)


def test_unknown_data_source_names_it_and_the_known_ones(make_images):
    with pytest.raises(
        ValueError,
        match=r"data_source 'flow_grpo/ocr' has no built-in image scorer; known: "
        r"jpeg_compressibility, jpeg_incompressibility",
    ):
        default_compute_score_image("flow_grpo/ocr", make_images(1, 0)[0], "x")
    with pytest.raises(ValueError, match=r"data_source None"):
        check_builtin_data_sources(["jpeg_compressibility", None])
    images = make_images(1, 2)
    with pytest.raises(RewardFunctionError, match=r"on sample 1 \(data_source 'flow_grpo/ocr'\): no built-in"):
        BuiltinScorer()(_batch(images, ["jpeg_compressibility", "flow_grpo/ocr", "flow_grpo/ocr"]))
