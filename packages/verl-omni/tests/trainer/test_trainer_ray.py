"""The trainer end to end on a local Ray (CPU, fp32, tiny Qwen-Image): on-policy first update, reproducibility,
bit-identical resume, weight sync, failures that name the worker, two actor ranks."""

from __future__ import annotations

import json
import os

import pytest
import torch

from verl_core.rollout.handoff import handoff_dir
from verl_core.rollout.owned_files import owner
from verl_core.rollout.shm_weights import PREFIX as SHM_PREFIX
from verl_omni.trainer.report import read_metrics

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _cli_run(model_path, fast_overrides: list[str], tmp_path, *, steps: int) -> list[str]:
    """`verl-omni-train` arguments of a short quickstart run on the tiny model (run folder and checkpoints in tmp)."""
    return [
        "--config-name",
        "quickstart",
        f"actor_rollout_ref.model.path={model_path}",
        *fast_overrides,
        f"trainer.run_dir={tmp_path / 'run'}",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
    ]


def _alive(segment: str) -> bool:
    """Whether the process that owns shared-memory `segment` (its name carries the owner's pid) still runs."""
    try:
        os.kill(owner(segment)[0], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def test_on_policy_first_update_reproducible_runs_and_bit_identical_resume(ray_session, straight_vs_resumed, tmp_path):
    def log_past_the_save(first_two):  # as if a longer run had logged past its save
        with open(first_two.run_dir / "metrics.jsonl", "a") as f:
            for step in (3, 4):
                f.write(json.dumps({"step": step, "critic/rewards/mean": 99.0}) + "\n")

    # 3 steps straight == 2 steps, stop, resume, 1 step: metrics, parameters and AdamW state bit-identical (one seed;
    # the 2-step run's last step validates, the straight run's step 2 does not)
    runs = straight_vs_resumed(tmp_path, ["trainer.test_freq=3"], split_only=("val/",), before_resume=log_past_the_save)
    straight = runs.straight

    # the first update in fp32 is on-policy: ratio 1, no KL between old and new policy, rollout == recompute
    first = straight.history[0]
    assert abs(first["actor/ratio_mean"] - 1) < 1e-6 and abs(first["actor/ppo_kl"]) < 1e-6
    for row in straight.history:  # the |old - rollout| log-prob gap is reported every step
        assert 0 <= row["actor/rollout_logprob_diff_max"] < 1e-4
    # the weights served advance with every step
    assert [row["rollout/weight_version"] for row in straight.history] == [1.0, 2.0, 3.0]
    # the resumed run's metrics.jsonl drops what was logged after its checkpoint: the same steps as straight
    split_rows = read_metrics(tmp_path / "split" / "run" / "metrics.jsonl")
    assert [r["step"] for r in split_rows] == [r["step"] for r in read_metrics(straight.run_dir / "metrics.jsonl")]
    assert all(r.get("critic/rewards/mean") != 99.0 for r in split_rows)
    # the rollout really serves the trained weights: same prompts and noise, other images after training
    assert sorted(straight.val_images) == [0, 3]
    assert not torch.equal(straight.val_images[0], straight.val_images[3])


def test_a_rollout_server_killed_mid_step_exits_1_naming_it_and_the_last_checkpoint_stays(
    ray_session, tiny_qwen_image_path, fast_overrides, tmp_path, kill_rollout_server_at, capsys
):
    import time

    from verl_omni.trainer.main import EXIT_FAILED, run

    kill_rollout_server_at(2)
    ckpt = tmp_path / "ckpt"
    argv = [
        *_cli_run(tiny_qwen_image_path, fast_overrides, tmp_path, steps=3),
        "trainer.save_freq=1",
        "actor_rollout_ref.rollout.lifecycle_timeout_s=60",
    ]
    start = time.monotonic()
    assert run(argv) == EXIT_FAILED
    assert time.monotonic() - start < 600
    err = capsys.readouterr().err
    assert "verl-omni-train: error at step 2: RolloutServiceError: rollout server rank 0 died" in err
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "1"
    assert (ckpt / "global_step_1" / "COMPLETE").is_file() and not (ckpt / "global_step_2").exists()
    assert (tmp_path / "run" / "metrics.jsonl").read_text().count("\n") == 1


class _RolloutSpy:
    """Records the trainer's rollout calls (in order) and the trajectories' `server_rank` / `weight_version`."""

    def __init__(self, components) -> None:
        self.inner, self.calls, self.rows = components.rollout, [], []
        components.rollout = self

    def generate(self, records, sampling, seed):
        self.calls.append("generate")
        batch = self.inner.generate(records, sampling, seed)
        self.rows.append((batch["server_rank"].tolist(), batch["weight_version"].tolist()))
        return batch

    def __getattr__(self, name):
        method = getattr(self.inner, name)
        if name in ("sleep", "wake_up"):
            self.calls.append(name)
        return method


def test_two_actor_ranks_and_two_http_servers_sleep_wake_and_sync_every_step(ray_session, trainer_run, tmp_path):
    spies, served = [], {}
    segments_before = {p for p in os.listdir(handoff_dir()) if p.startswith(SHM_PREFIX)}

    rank_pids: list[int] = []  # the actor ranks' pids: the weight segments' owners

    def inspect(components):
        served.update(components.rollout.server_metrics())
        rank_pids.extend(node["pid"] for node in components.actor.nodes)

    run = trainer_run(
        tmp_path,
        ["trainer.n_gpus_per_node=2", "trainer.total_training_steps=2", "trainer.val_before_train=false"],
        wrap=lambda components: spies.append(_RolloutSpy(components)),
        inspect=inspect,
    )
    assert run.error is None, run.error
    assert [row["training/global_step"] for row in run.history] == [1.0, 2.0]
    assert all(row["rollout/weight_version"] == row["training/global_step"] for row in run.history)
    assert (run.run_dir / "metrics.jsonl").read_text().count("\n") == 2
    spy = spies[0]
    # colocated: each step's rollout is followed by sleep, and the weight sync by wake-up, in pairs
    assert spy.calls == ["generate", "sleep", "wake_up"] * 2
    # the trajectories came from both HTTP servers, each serving the weights pushed after the previous step
    for step, (ranks, versions) in enumerate(spy.rows):
        assert sorted(set(ranks)) == [0, 1] and set(versions) == {step}
    # the servers themselves saw the lifecycle: 2 sleeps, 2 LoRA updates, 2 steps x 2 prompts x n=2 images
    assert sorted(served) == [0, 1]
    assert sum(m["counters"]["sleeps"] for m in served.values()) == 4
    assert all(m["counters"]["weight_updates"] == 2 and m["weight_version"] == 2 for m in served.values())
    # both servers are on this host: each update came through the actor's shared-memory segment, not HTTP
    assert all(m["counters"].get("weight_updates_shm") == 2 for m in served.values()), served
    assert all(row["perf/weight_sync_shm_servers"] == 2.0 for row in run.history)
    segments_after = {p for p in os.listdir(handoff_dir()) if p.startswith(SHM_PREFIX)}
    # rank 0 unlinked its segment before it was killed: no new segment of this run's ranks or of a dead process (a
    # live owner is a run beside this one: another xdist worker's, another job's on the host)
    assert len(rank_pids) == 2
    new = segments_after - segments_before
    left = [n for n in new if owner(n) is None or owner(n)[0] in rank_pids or not _alive(n)]
    assert left == [], left
    assert all(m["lora_active"] and m["state"] == "ready" for m in served.values())
    assert sum(m["images_generated"] for m in served.values()) == 8
    # transport + codec time of the HTTP requests (client round trip minus the server's own latency) is logged
    for row in run.history:
        assert row["timing_s/gen_request_overhead"] > 0 and 0 < row["timing_share/gen_request_overhead"] < 1


def test_lora_binding_no_module_is_an_error_naming_target_modules(ray_session, tiny_qwen_image_path, tmp_path):
    from verl_omni.trainer.components import build_components, preflight
    from verl_omni.trainer.config import load_config
    from verl_omni.trainer.workers import WorkerError

    config = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_qwen_image_path}",
            "actor_rollout_ref.model.target_modules=[to_qkv]",
            f"trainer.run_dir={tmp_path}",
            "trainer.cpu_threads_per_worker=1",
        ],
        config_name="quickstart",
    )
    with pytest.raises(WorkerError, match=r"rank 0 .*init_engine.*target_modules=\['to_qkv'\].*bound no module"):
        build_components(preflight(config))


_DYING_REWARD = """
import os

from verl_omni.reward import jpeg_compressibility

CALLS = {"n": 0}


def compute_score(data_source, solution_image, ground_truth, extra_info=None, **kwargs):
    CALLS["n"] += 1
    if CALLS["n"] > int(os.environ.get("DIE_AFTER", "4")):  # the 5th image: the first one of step 2
        os._exit(1)
    return float(jpeg_compressibility(solution_image)[0])
"""


def test_a_reward_worker_killed_mid_step_exits_1_naming_it_and_the_last_checkpoint_stays(
    ray_session, tiny_qwen_image_path, fast_overrides, tmp_path, capsys
):
    from verl_omni.trainer.main import EXIT_FAILED, run

    (tmp_path / "dying_reward.py").write_text(_DYING_REWARD)
    ckpt = tmp_path / "ckpt"
    argv = [
        *_cli_run(tiny_qwen_image_path, fast_overrides, tmp_path, steps=3),
        "trainer.save_freq=1",
        "reward.pool=ray",
        "reward.num_workers=1",
        "reward.timeout_s=120",
        f"reward.custom_reward_function.path={tmp_path / 'dying_reward.py'}",
        "reward.custom_reward_function.name=compute_score",
    ]
    assert run(argv) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "verl-omni-train: error at step 2:" in err and "reward worker" in err
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "1"
    assert (ckpt / "global_step_1" / "COMPLETE").is_file() and not (ckpt / "global_step_2").exists()


def test_a_rollout_request_over_its_timeout_exits_1_naming_the_server_and_the_call(
    ray_session, tiny_qwen_image_path, fast_overrides, tmp_path, capsys
):
    from verl_omni.trainer.main import EXIT_FAILED, run

    argv = [
        *_cli_run(tiny_qwen_image_path, fast_overrides, tmp_path, steps=1),
        "actor_rollout_ref.rollout.request_timeout_s=0.001",  # no image is that fast: the server times out
    ]
    (tmp_path / "run").mkdir(parents=True, exist_ok=True)
    (tmp_path / "run" / "error.log").write_text("an earlier run's error\n")
    assert run(argv) == EXIT_FAILED
    err = capsys.readouterr().err
    assert "error at step 1: RolloutServiceError: rollout server rank 0 failed during generate" in err
    assert "EngineTimeoutError" in err and "(bound by actor_rollout_ref.rollout.request_timeout_s)" in err
    # the full traceback goes to the run folder, and the error line says where
    log = tmp_path / "run" / "error.log"
    assert f"(full traceback: {log})\n" in err  # the end of the error line
    text = log.read_text()
    assert text.startswith("verl-omni-train: error at step 1, ") and "Traceback (most recent call last):" in text
    assert "RolloutServiceError: rollout server rank 0 failed during generate" in text
    # the earlier run's error.log was set aside when this run started, not overwritten unseen or left as current
    assert (tmp_path / "run" / "error.previous.log").read_text() == "an earlier run's error\n"
