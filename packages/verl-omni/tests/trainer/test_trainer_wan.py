"""The trainer end to end on the tiny Wan 2.1 (local Ray, CPU, fp32, 5-frame 32x32 videos): on-policy first update,
validation videos, bit-identical resume."""

from __future__ import annotations

import pytest

from verl_omni.trainer.report import write_sample_grid

from .test_video_grid import read_mp4

pytestmark = [pytest.mark.ray, pytest.mark.slow]

WAN = ["actor_rollout_ref.rollout.pipeline.num_frames=5"]  # blocks. is the Wan adapter's default


def test_wan_run_validates_videos_and_resumes_bit_identically(ray_session, tiny_wan_path, straight_vs_resumed,
                                                             tmp_path):  # fmt: skip
    """3 steps straight == 2 steps, save, resume, 1 step (`straight_vs_resumed`: metrics, parameters and AdamW state
    bit-identical); the first update is on-policy; the validation videos play back from the MP4 written beside the
    sample grid."""
    straight = straight_vs_resumed(tmp_path, WAN, model_path=tiny_wan_path).straight
    row = straight.history[0]  # fp32, on-policy: the training forwards reproduce the rollout's video log-probs
    assert abs(row["actor/ratio_mean"] - 1) < 1e-6 and row["actor/rollout_logprob_diff_max"] < 1e-4
    assert straight.val_images[0].shape[1:] == (5, 3, 32, 32)  # validation at step 0: uint8 videos
    grid = write_sample_grid(straight.val_images, tmp_path / "samples_first_last.png")
    count, rows = min(v.shape[0] for v in straight.val_images.values()), min(len(straight.val_images), 2)
    assert read_mp4(grid.with_suffix(".mp4")).shape == (5, rows * 64, count * 64, 3)  # 5 frames, 32x32 cells at x2
