"""The trainer end to end on the tiny Wan 2.1 (local Ray, CPU, fp32, 5-frame 32x32 videos): on-policy first update,
validation videos, bit-identical resume."""

from __future__ import annotations

import pytest

from verl_omni.trainer.report import write_sample_grid

from .conftest import assert_state_equal, run_trainer
from .test_video_grid import read_mp4

pytestmark = [pytest.mark.ray, pytest.mark.slow]

WAN = ["actor_rollout_ref.rollout.pipeline.num_frames=5"]  # blocks. is the Wan adapter's default


def test_wan_run_validates_videos_and_resumes_bit_identically(ray_session, tiny_wan_path, metric_diff, tmp_path):
    """2 steps straight == 1 step, save, resume, 1 step: metrics, parameters and AdamW state bit-identical; the
    validation videos play back from the MP4 written beside the sample grid."""
    straight = run_trainer(tiny_wan_path, tmp_path / "straight", [*WAN, "trainer.total_training_steps=2"],
                           fingerprint=True)  # fmt: skip
    assert straight.error is None, straight.error
    split = [*WAN, "trainer.save_freq=1"]
    first = run_trainer(tiny_wan_path, tmp_path / "split", [*split, "trainer.total_training_steps=1"])
    assert first.error is None, first.error
    again = [*split, "trainer.total_training_steps=2", "trainer.resume_mode=auto"]
    resumed = run_trainer(tiny_wan_path, tmp_path / "split", again, fingerprint=True)
    assert resumed.error is None, resumed.error
    row = straight.history[0]  # fp32, on-policy: the training forwards reproduce the rollout's video log-probs
    assert abs(row["actor/ratio_mean"] - 1) < 1e-6 and row["actor/rollout_logprob_diff_max"] < 1e-4
    assert straight.val_images[0].shape[1:] == (5, 3, 32, 32)  # validation at step 0: uint8 videos
    grid = write_sample_grid(straight.val_images, tmp_path / "samples_first_last.png")
    count, rows = min(v.shape[0] for v in straight.val_images.values()), min(len(straight.val_images), 2)
    assert read_mp4(grid.with_suffix(".mp4")).shape == (5, rows * 64, count * 64, 3)  # 5 frames, 32x32 cells at x2
    assert len(resumed.history) == 1 and metric_diff(straight.history[1], resumed.history[0]) == []
    assert_state_equal(straight.fingerprint, resumed.fingerprint)
