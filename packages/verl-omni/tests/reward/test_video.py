"""Video rewards: image rewards score subsampled frames (`frame_interval`), temporal smoothness, built-in routing."""

import pytest
import torch

from verl_omni.reward import BuiltinScorer, RewardBatch, jpeg_compressibility
from verl_omni.reward.builtin import jpeg_compressibility_reward
from verl_omni.reward.video import score_video_frames, subsample_frames, temporal_smoothness


def _videos() -> torch.Tensor:
    """Two 5-frame 32x32 videos: even frames flat grey, odd frames noise (video 1 is the noisier one)."""
    g = torch.Generator().manual_seed(0)
    v = torch.full((2, 5, 3, 32, 32), 128, dtype=torch.uint8)
    v[:, 1::2] = torch.randint(0, 256, (2, 2, 3, 32, 32), generator=g, dtype=torch.uint8)
    v[1, 0] = torch.randint(0, 256, (3, 32, 32), generator=g, dtype=torch.uint8)
    return v


def test_frame_interval_picks_the_frames_an_image_reward_scores():
    v = _videos()
    assert subsample_frames(v, 2).shape == (2, 3, 3, 32, 32)
    every = score_video_frames(jpeg_compressibility, v)
    even = score_video_frames(jpeg_compressibility, v, [{"frame_interval": 2}, {"frame_interval": 2}])
    for b in range(2):
        assert every[b].item() == pytest.approx(jpeg_compressibility(v[b]).mean().item(), abs=1e-12)
        assert even[b].item() == pytest.approx(jpeg_compressibility(v[b, ::2]).mean().item(), abs=1e-12)
    assert (even > every).all()  # the noisy odd frames are skipped
    # a video's score uses only its own frames: scored alone it gets the same value
    assert score_video_frames(jpeg_compressibility, v[1:], [{"frame_interval": 2}]).item() == even[1].item()
    assert even[0] > even[1]


def test_temporal_smoothness():
    still = torch.full((1, 4, 3, 8, 8), 50, dtype=torch.uint8)
    flicker = still.clone()
    flicker[:, 1::2] = 250
    scores = temporal_smoothness(torch.cat([still, flicker]))
    assert scores.tolist() == pytest.approx([0.0, -200 / 255])


def test_builtin_routes_score_videos_with_frame_interval_from_extra_info():
    v = _videos()
    infos = [{"frame_interval": 2}, {}]
    batch = RewardBatch(v, ["a", "b"], ["jpeg_compressibility"] * 2, [None, None], infos)
    want = score_video_frames(jpeg_compressibility, v, infos)
    assert BuiltinScorer()(batch).scores.tolist() == pytest.approx(want.tolist(), abs=1e-6)
    assert jpeg_compressibility_reward(v, extra_infos=infos).tolist() == want.tolist()
    smooth = RewardBatch(v, ["a", "b"], ["video_temporal_smoothness"] * 2, [None, None], [{}, {}])
    assert BuiltinScorer()(smooth).scores.tolist() == pytest.approx(temporal_smoothness(v).tolist(), abs=1e-6)


def test_bad_input_names_the_key():
    with pytest.raises(ValueError, match=r"extra_info\['frame_interval'\] of row 1: expected an int >= 1, got 0"):
        score_video_frames(jpeg_compressibility, _videos(), [{}, {"frame_interval": 0}])
    with pytest.raises(ValueError, match=r"videos: expected a tensor of shape \(B, F, 3, H, W\), got \(2, 3, 8, 8\)"):
        temporal_smoothness(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"images: expected shape \(B, 3, H, W\) or videos \(B, F, 3, H, W\)"):
        RewardBatch(torch.zeros(1, 2, 4, 8, 8, dtype=torch.uint8), ["a"], [None], [None], [{}])
