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


@pytest.mark.ray
@pytest.mark.slow
def test_vlm_judge_term_asks_the_trainers_reward_model(ray_session, trainer_run, tmp_path):
    from verl_core.testing.tiny_llm import build_tiny_vlm

    vlm_path = build_tiny_vlm(tmp_path / "tiny-vlm")
    seen = {}
    overrides = [
        "trainer.total_training_steps=1", "trainer.val_before_train=false", "trainer.save_freq=-1",
        "reward.timeout_s=120",
        "reward.reward_model.enable=true", f"reward.reward_model.model_path={vlm_path}",
        "reward.reward_model.rollout.dtype=float32", "reward.reward_model.rollout.request_timeout_s=60",
        "+reward.reward_functions.small.builtin=jpeg_compressibility",
        "+reward.reward_functions.judge.builtin=vlm_judge", "+reward.reward_functions.judge.weight=0.5",
        "+reward.reward_functions.judge.reward_kwargs.max_tokens=4",
        "+reward.reward_functions.judge.reward_kwargs.on_unparsable=score",
        "+reward.reward_functions.judge.reward_kwargs.unparsable_score=0.25",
    ]  # fmt: skip
    run = trainer_run(tmp_path, overrides, inspect=lambda c: seen.update(metrics=c.reward_model.server_metrics()))
    assert run.error is None, run.error
    (row,) = run.history
    (server,) = seen["metrics"].values()
    assert server["counters"]["chat_completions"] == 4  # the judge's requests reached the reward model: 2 x n=2
    # a random model's answers hold no number: each is counted, and scored unparsable_score, never 0
    assert row["reward/judge/judge_unparsable"] == 1.0 and row["reward/judge/mean"] == 0.25
    assert row["critic/rewards/mean"] == pytest.approx(row["reward/small/mean"] + 0.5 * 0.25, rel=1e-5)
