"""`trainer.mode: separate` end to end on a local Ray (CPU, fp32, tiny Qwen-Image): with lag 0 it is the colocated
run (and resumes bit for bit); a killed rollout server stops the run naming it, or with
`on_rollout_failure: restart` is relaunched with the actor's weights and the run finishes."""

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
SEPARATE_ON_ACTOR_DEVICES = [  # one device pool: the rollout servers on the actor's bundles (`share_devices`)
    *[o for o in SEPARATE if not o.startswith("actor_rollout_ref.rollout.nnodes=")],
    "actor_rollout_ref.rollout.nnodes=0",
    "trainer.separate.share_devices=true",
]


def test_separate_with_threshold_zero_equals_colocated_and_resumes_bit_identically(
    ray_session, straight_vs_resumed, tmp_path
):
    """Colocated 3 steps; separate with lag 0: 2 steps straight (the rollout must wait for each push, else step 2
    trains on a stale batch), then a resume to step 3. Metrics equal (timings and `async/*` aside), weights and
    AdamW state equal."""
    common = ["trainer.val_before_train=false"]
    lag0 = [*SEPARATE, "trainer.separate.max_off_policy_threshold=0", *common]
    runs = straight_vs_resumed(tmp_path, common, split_overrides=lag0, split_only=("async/", "rollout_corr/"))
    for b in [*runs.first_two.history, *runs.resumed.history]:
        assert b["async/version_lag/0"] == 2 and b["async/dropped_groups"] == 0
        assert 0 <= b["async/rollout_idle_frac"] <= 1 and 0 <= b["async/actor_idle_frac"] <= 1


@pytest.mark.parametrize(
    ("policy", "named"),
    [
        pytest.param([], "", id="fail"),
        pytest.param(
            ["trainer.separate.on_rollout_failure=restart", "trainer.separate.max_restarts=0"],
            " (after 0 restart(s): trainer.separate.max_restarts=0)",
            id="restart-none-left",
        ),
    ],
)
def test_a_killed_rollout_server_exits_1_naming_it_within_the_queue_timeout(
    ray_session, tiny_qwen_image_path, fast_overrides, tmp_path, kill_rollout_server_at, capsys, policy, named
):
    import time

    from verl_omni.trainer.main import EXIT_FAILED, run

    kill_rollout_server_at(1)
    argv = [
        "--config-name",
        "quickstart",
        f"actor_rollout_ref.model.path={tiny_qwen_image_path}",
        *fast_overrides,
        *SEPARATE,
        "trainer.separate.parameter_sync_step=3",  # no push before the end: the producer is what meets the corpse
        "trainer.separate.max_off_policy_threshold=2",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.total_training_steps=3",
        "trainer.save_freq=1",
        "trainer.val_before_train=false",
        "actor_rollout_ref.rollout.lifecycle_timeout_s=60",
        *policy,
    ]
    start = time.monotonic()
    assert run(argv) == EXIT_FAILED
    assert time.monotonic() - start < 120  # trainer.separate.queue_timeout_s: the death is seen, not waited out
    err = capsys.readouterr().err
    assert "RolloutServiceError: the separate rollout stopped: rollout server rank 0 died" in err, err[-2000:]
    assert named in err, err[-2000:]
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "global_step_1" / "COMPLETE").is_file()


def test_a_killed_rollout_server_is_relaunched_with_the_actors_weights_and_the_run_finishes(
    ray_session, tiny_qwen_image_path, fast_overrides, tmp_path, kill_rollout_server_at
):
    """`on_rollout_failure: restart` on one device pool (`share_devices`: the servers on the actor's bundles): the
    server killed at step 1 is relaunched in its bundle, given the actor's step-1 weights (the served-weights check
    compares them bit for bit; the producer checks every row's version) and the lost batch generated again."""
    from verl_omni.trainer.main import run
    from verl_omni.trainer.report import read_metrics

    kill_rollout_server_at(1)
    argv = [
        "--config-name",
        "quickstart",
        f"actor_rollout_ref.model.path={tiny_qwen_image_path}",
        *fast_overrides,
        *SEPARATE_ON_ACTOR_DEVICES,
        "trainer.separate.on_rollout_failure=restart",
        "trainer.separate.max_restarts=1",
        "trainer.check_served_weights=true",
        "trainer.separate.parameter_sync_step=3",  # no push before the end: the producer is what meets the corpse
        "trainer.separate.max_off_policy_threshold=2",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.total_training_steps=3",
        "trainer.save_freq=-1",
        "trainer.val_before_train=false",
        "actor_rollout_ref.rollout.lifecycle_timeout_s=60",
    ]
    assert run(argv) == 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["async/rollout_restarts"] == 1.0
    assert rows[-1]["rollout/weight_version"] == 3.0
    assert all(r["async/version_lag_max"] <= 2 for r in rows)


RESTART = ["trainer.separate.on_rollout_failure=restart"]


DIED = "RolloutServiceError: the weight push of version 1 failed: rollout server rank 0 died during update_"
HUNG = (
    "RolloutServiceError: the weight push of version 1 failed: rollout server rank(s) [0] did not take it within "
    "actor_rollout_ref.rollout.weight_sync_timeout_s and still serve an older version: hung"
)


@pytest.mark.parametrize(
    ("hang", "policy", "named"),
    [
        pytest.param(False, [*RESTART, "trainer.separate.max_restarts=1"], None, id="restart"),
        pytest.param(False, [], "", id="fail"),
        pytest.param(
            False,
            [*RESTART, "trainer.separate.max_restarts=0"],
            " (after 0 restart(s): trainer.separate.max_restarts=0)",
            id="restart-none-left",
        ),
        pytest.param(True, [*RESTART, "trainer.separate.max_restarts=1"], None, id="hung-restart"),
        pytest.param(True, [], "", id="hung-fail"),
    ],
)
def test_a_rollout_server_met_dead_by_the_weight_push_is_relaunched_or_named(
    ray_session, tiny_qwen_image_path, fast_overrides, tmp_path, kill_rollout_server_at, capsys, hang, policy, named
):
    """Lag 0 and a push after every step: while step 1 is scored the producer waits for version 1 (batch 2 may not
    start before it), so the server killed then is met first by step 1's weight push. `restart` relaunches the
    servers, pushes version 1 to them (checked bit for bit), the producer generates batch 2 on them and the run
    finishes; `fail` (or no restart left) exits 1 naming the server (and the limit). `hung-*`: the server stays
    alive but its weight update never finishes; the push times out (weight_sync_timeout_s) and the server, still on
    version 0, is restarted or named the same way."""
    import math

    from verl_omni.trainer.main import EXIT_FAILED, run
    from verl_omni.trainer.report import read_metrics

    kill_rollout_server_at(1, hang=hang)
    argv = [
        "--config-name",
        "quickstart",
        f"actor_rollout_ref.model.path={tiny_qwen_image_path}",
        *fast_overrides,
        *SEPARATE_ON_ACTOR_DEVICES,
        "trainer.check_served_weights=true",
        "trainer.separate.parameter_sync_step=1",
        "trainer.separate.max_off_policy_threshold=0",  # batch 2 waits for the push of version 1
        f"trainer.run_dir={tmp_path / 'run'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.total_training_steps=2",
        "trainer.save_freq=-1",
        "trainer.val_before_train=false",
        "actor_rollout_ref.rollout.lifecycle_timeout_s=60",
        *(["actor_rollout_ref.rollout.weight_sync_timeout_s=5"] if hang else []),
        *policy,
    ]
    code = run(argv)
    err = capsys.readouterr().err
    if named is not None:
        assert code == EXIT_FAILED
        assert (HUNG if hang else DIED) in err and named in err, err[-3000:]
        return
    assert code == 0, err[-3000:]
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["async/rollout_restarts"] for r in rows] == [1.0, 1.0]
    assert [r["rollout/weight_version"] for r in rows] == [1.0, 2.0]
    assert all(r["async/version_lag_max"] == 0 for r in rows)
    assert all(math.isfinite(r["critic/rewards/mean"]) for r in rows)


def test_separate_with_lag_up_to_2_and_is_weights_raises_the_reward_by_more_than_3_standard_errors(
    ray_session, tiny_qwen_image_path, tmp_path
):
    """The quickstart's 12 steps (as `test_trainer_direction`), weights pushed every 2 steps, groups up to 2 versions
    old trained with truncated IS weights: the reward margin (last 3 steps minus first 3) still exceeds +3 SE."""
    from verl_omni.trainer.main import run
    from verl_omni.trainer.report import learning_margin, read_metrics

    argv = [
        "--config-name",
        "quickstart",
        f"actor_rollout_ref.model.path={tiny_qwen_image_path}",
        f"trainer.run_dir={tmp_path / 'run'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        *SEPARATE,
        "trainer.separate.parameter_sync_step=2",
        "trainer.separate.max_off_policy_threshold=2",
        "algorithm.rollout_correction.rollout_is=token",
        "trainer.total_training_steps=12",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
    ]
    assert run(argv) == 0
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert [r.get("rollout/weight_version") for r in rows[1::2]] == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    stale = sum(r.get("async/version_lag/1", 0) + r.get("async/version_lag/2", 0) for r in rows)
    assert stale > 0 and all(r["async/version_lag_max"] <= 2 for r in rows)
    assert any("rollout_corr/logprob_gap_lag1" in r for r in rows) and any(
        "rollout_corr/is_weight_mean" in r for r in rows
    )
    margin = learning_margin(rows)
    assert margin is not None and margin["margin"] > 3.0, margin
