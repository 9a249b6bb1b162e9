"""The quickstart on a tiny guidance-distilled FLUX.1 (`tiny://flux`, local Ray, CPU): the update goes the right way."""

from __future__ import annotations

import pytest

from verl_omni.trainer.report import learning_margin, read_metrics

from .test_trainer_direction import _quickstart

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_the_flux_quickstart_raises_the_jpeg_reward_by_more_than_3_standard_errors(ray_session, tmp_path, monkeypatch):
    """20 seeded quickstart steps on `tiny://flux` with distilled guidance 3.5 (built into `VERL_OMNI_CACHE`): the
    mean reward of the last 3 steps minus the first 3 (`report.learning_margin`) must exceed +3 standard errors. On
    main it was +39.5 and +42.8 in two runs (fp32 on the CPU, fixed seeds; 12 steps gave +3.7, 24 gave +102.8);
    about 90 s.

    Mutation run by hand (edited in, this test run, restored): advantages negated in `FlowGRPOTrainer.train`
    (`batch["advantages"] = -compute_flow_grpo_advantages(...)`): FAILED, margin -12.3.
    """
    from verl_omni.trainer.main import run

    monkeypatch.setenv("VERL_OMNI_CACHE", str(tmp_path / "cache"))
    argv = _quickstart(
        "tiny://flux",
        tmp_path,
        "actor_rollout_ref.rollout.pipeline.guidance_scale=3.5",
        "trainer.total_training_steps=20",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    )
    assert run(argv) == 0
    assert (tmp_path / "cache" / "tiny" / "flux-tiny-seed0" / "model_index.json").is_file()
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 21))
    margin = learning_margin(rows)
    assert margin is not None and margin["margin"] > 3.0, margin
