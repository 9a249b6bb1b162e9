"""`verl-omni-train` with two built-in reward terms: each term's mean is logged and the reward is their sum."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.ray
@pytest.mark.slow
def test_a_run_with_two_reward_terms_logs_each_term(tiny_qwen_image_path, fast_overrides, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "verl_omni.trainer.main",
        f"actor_rollout_ref.model.path={tiny_qwen_image_path}", *fast_overrides, "trainer.val_before_train=false",
        f"trainer.run_dir={run_dir}", f"trainer.default_local_dir={tmp_path / 'ckpt'}", "trainer.save_freq=-1",
        "trainer.total_training_steps=2",
        "+reward.reward_functions.small.builtin=jpeg_compressibility", "+reward.reward_functions.small.weight=2.0",
        "+reward.reward_functions.large.builtin=jpeg_incompressibility", "+reward.reward_functions.large.weight=0.01",
        "reward.aggregation=weighted_sum",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "RAY_AUTH_MODE")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"}, cwd=tmp_path,
                          timeout=500)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "critic/rewards/mean" in r]
    assert len(train) == 2
    for row in train:
        small, large = row["reward/small/mean"], row["reward/large/mean"]
        assert small < 0 < large  # -kB/500 and +kB of the same images
        assert small == pytest.approx(-large / 500, rel=1e-5)
        assert row["critic/rewards/mean"] == pytest.approx(2.0 * small + 0.01 * large, rel=1e-4, abs=1e-6)
