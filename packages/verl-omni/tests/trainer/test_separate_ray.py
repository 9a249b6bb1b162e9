"""`trainer.mode: separate` end to end on a local Ray (CPU, fp32, tiny Qwen-Image): with lag 0 it is the colocated
run (and resumes bit for bit); a killed rollout server stops the run naming it."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SEPARATE = [
    "trainer.mode=separate",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.free_cache_engine=false",
    "trainer.separate.queue_timeout_s=120",
]


def test_separate_with_threshold_zero_equals_colocated_and_resumes_bit_identically(
    ray_session, trainer_run, metric_diff, tmp_path
):
    common = ["trainer.val_before_train=false"]
    colocated = trainer_run(tmp_path / "colocated", [*common, "trainer.total_training_steps=2"], fingerprint=True)
    assert colocated.error is None, colocated.error
    lag0 = [*SEPARATE, "trainer.separate.max_off_policy_threshold=0", *common]
    first = trainer_run(tmp_path / "separate", [*lag0, "trainer.total_training_steps=1", "trainer.save_freq=1"])
    assert first.error is None, first.error
    resumed = trainer_run(
        tmp_path / "separate", [*lag0, "trainer.total_training_steps=2", "trainer.resume_mode=auto"], fingerprint=True
    )
    assert resumed.error is None, resumed.error

    separate = [*first.history, *resumed.history]
    for a, b in zip(colocated.history, separate, strict=True):
        only_separate = {k for k in b if k.startswith("async/") or k.startswith("rollout_corr/")}
        assert [k for k in metric_diff(a, {k: v for k, v in b.items() if k not in only_separate})] == []
        assert b["async/version_lag/0"] == 2 and b["async/dropped_groups"] == 0
        assert 0 <= b["async/rollout_idle_frac"] <= 1 and 0 <= b["async/actor_idle_frac"] <= 1
    assert colocated.fingerprint["model"].keys() == resumed.fingerprint["model"].keys()
    for name, value in colocated.fingerprint["model"].items():
        assert value.equal(resumed.fingerprint["model"][name]), name
