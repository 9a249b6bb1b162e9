"""`benchmarks/bench_trainer_run.py` drives the real trainer end to end in its tiny preset on the CPU (~30 s)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import statistics
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[4]


def _bench():
    path = REPO / "benchmarks" / "bench_trainer_run.py"
    spec = importlib.util.spec_from_file_location("bench_trainer_run", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    try:
        spec.loader.exec_module(bench)
    finally:
        sys.modules.pop(spec.name, None)
    return bench


@pytest.mark.timeout(300)
def test_trainer_run_benchmark_measures_the_trainer_per_stage_and_leaves_no_process(tmp_path):
    pytest.importorskip("ray")
    res = _bench().main(
        ["--preset", "tiny", "--device", "cpu", "--variants", "recompute", "--warmup", "1", "--steps", "2",
         "--out", str(tmp_path)]
    )  # fmt: skip
    run = res["variants"]["recompute"]
    assert run["rc"] == 0 and run["leftover_processes"] == {}
    # the figures are the median of the measured steps of the run's own metrics.jsonl (warm-up excluded)
    rows = [json.loads(line) for line in (tmp_path / "runs" / "tiny_recompute" / "metrics.jsonl").open()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert run["step_s"] == pytest.approx(statistics.median(r["timing_s/step"] for r in rows[1:]))
    assert run["warmup_step_s"] == [round(rows[0]["timing_s/step"], 2)]
    assert run["images_per_s"] == pytest.approx(4 / run["step_s"])
    # every stage the issue asks about is timed: generate, reward, old log-prob, ref, update, weight sync, transfer
    assert {"gen", "rollout_sleep", "reward", "old_log_prob", "ref", "update_actor", "update_weights"} <= set(
        run["stage_s"]
    )
    assert sum(run["stage_s"].values()) == pytest.approx(run["step_s"], rel=1e-6)
    assert {"rollout_wake", "weight_export", "weight_send", "gen_request_overhead", "version_check_and_rest"} <= set(
        run["sub_stage_s"]
    )
    assert run["step1"]["pg_clipfrac"] == 0.0  # fp32: the recomputed old log-probs equal the rollout's
    assert res["baseline"]["images_per_s"] > 0 and run["vs_baseline"] > 0
    assert pathlib.Path(res["chart"]).is_file()
    assert (tmp_path / "bench_trainer_run_cpu_tiny.json").is_file()
