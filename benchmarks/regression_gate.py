"""No-regression gate on the CPU: the tiny FlowGRPO step's pieces, timed against a fixed matmul, vs a baseline file.

`nox -s benchmarks` runs it. Cases (the pieces of `bench_trainer_workload.ProjectLoop` on the tiny SD3 preset: 64²,
3 steps, CFG, LoRA r32, 2 prompts x 2): `gen` (the rollout engine's `generate`), `ref` (the FSDP2 engine's reference
pass), `update` (`update_policy` with the rollout's log-probs as the old ones) and `export` (the LoRA export into the
rollout engine, with its merge, ten times). Times are the process's CPU time (`time.process_time`), not wall time:
on a CPU shared with other jobs the wall time mostly measures the others. CPU speed still differs between machines
and moves with their load (caches, clocks), so each case is timed between two runs of a fixed reference computation
(a 384 x 384 fp32 matmul, 40 times) and the figure is the ratio case / mean of the two references. The gate
compares the median ratio over `--repeats` rounds (default 9, interleaved over the cases) with
`benchmarks/baseline_cpu.json` and fails when a median is more than `--threshold` (0.30) above its baseline. One
torch thread throughout.

    python benchmarks/regression_gate.py                  # compare with the baseline (exit 1 on a slowdown)
    python benchmarks/regression_gate.py --write-baseline # measure and write the baseline file
    python benchmarks/regression_gate.py --self-test      # a 2x slowdown injected into every case must fail

`--self-test` sets `VERL_BENCH_GATE_SLOWDOWN=2`, which runs each case's work twice (and nothing else reads it): the
gate must then report every case slower.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
BASELINE = HERE / "baseline_cpu.json"
SLOWDOWN_ENV = "VERL_BENCH_GATE_SLOWDOWN"
THRESHOLD = 0.30


def compare(current: dict[str, float], baseline: dict[str, float], threshold: float = THRESHOLD) -> list[str]:
    """The cases whose median ratio is more than `threshold` above the baseline's, as readable lines.

    A case in the baseline but not measured is a failure (a renamed or dropped case must update the baseline); a new
    case without a baseline is not.
    """
    failures = []
    for case, base in sorted(baseline.items()):
        if case not in current:
            failures.append(f"{case}: in {BASELINE.name} but not measured; rewrite the baseline (--write-baseline)")
            continue
        change = current[case] / base - 1
        if current[case] > base * (1 + threshold):
            failures.append(f"{case}: median ratio {current[case]:.3f} vs baseline {base:.3f} (+{change:.0%} > "
                            f"+{threshold:.0%})")  # fmt: skip
    return failures


def _reference(torch: Any) -> float:
    a = torch.randn(384, 384, generator=torch.Generator().manual_seed(0))
    t0 = time.process_time()
    for _ in range(40):
        a = torch.tanh(a @ a * 1e-2)
    return time.process_time() - t0


def build_cases() -> tuple[dict[str, Callable[[], Any]], Any]:
    """The gate's cases on a fresh tiny pipeline folder (the folder lives as long as the returned handle)."""
    sys.path.insert(0, str(HERE))
    import torch
    from bench_trainer_workload import ProjectLoop
    from trainer_workload_parts import PRESETS, PROMPTS, build_pipeline_folder

    from verl_omni.algos import compute_flow_grpo_advantages

    tmp = tempfile.TemporaryDirectory(prefix="regression_gate_")
    folder = pathlib.Path(tmp.name) / "pipeline"
    w = PRESETS["tiny"]
    build_pipeline_folder(w, folder, torch.float32)
    loop = ProjectLoop(folder, w, torch.device("cpu"), torch.float32)
    engine = loop.engine(frozenset())
    sampling = dataclasses.replace(loop.sampling, seed=0)
    traj = loop.rollout.generate(PROMPTS, sampling)
    batch = traj.exclude("images")
    rewards = torch.linspace(0, 1, batch.batch_size[0])
    batch["advantages"] = compute_flow_grpo_advantages(rewards, traj["prompt_index"])
    batch["old_log_probs"] = batch["log_probs"].clone()
    batch.update(engine.compute_ref_log_prob(batch))
    cases = {
        "gen": lambda: loop.rollout.generate(PROMPTS, sampling),
        "ref": lambda: engine.compute_ref_log_prob(batch),
        "update": lambda: engine.update_policy(batch),
        "export": lambda: [loop.sync_weights(engine) for _ in range(10)],  # one export is a few ms: ten
    }
    return cases, (tmp, loop, engine)


def measure(repeats: int, slowdown: int = 1) -> dict[str, Any]:
    """Median and spread of each case's ratio to the reference over `repeats` interleaved rounds."""
    import torch

    torch.set_num_threads(1)
    cases, keep = build_cases()
    for fn in cases.values():  # warm-up: first-call allocations and lazy initialisation
        fn()
    _reference(torch)
    ratios: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            before = _reference(torch)
            t0 = time.process_time()
            for _ in range(slowdown):
                fn()
            took = time.process_time() - t0
            after = _reference(torch)
            ratios[name].append(took / ((before + after) / 2))
    del keep
    return {
        name: {"median": statistics.median(r), "min": min(r), "max": max(r),
               "spread": (max(r) - min(r)) / statistics.median(r), "ratios": [round(x, 4) for x in r]}
        for name, r in ratios.items()
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9, help="interleaved rounds; the median is compared")
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="largest allowed rise of a median ratio")
    parser.add_argument("--baseline", default=str(BASELINE))
    parser.add_argument("--write-baseline", action="store_true", help="measure and write the baseline file")
    parser.add_argument("--self-test", action="store_true", help=f"inject a 2x slowdown ({SLOWDOWN_ENV}=2): must fail")
    parser.add_argument("--json", default=None, help="also write this run's figures here")
    args = parser.parse_args(argv)
    if args.self_test:
        os.environ[SLOWDOWN_ENV] = "2"
    slowdown = int(os.environ.get(SLOWDOWN_ENV, "1"))
    t0 = time.perf_counter()
    figures = measure(args.repeats, slowdown)
    current = {k: v["median"] for k, v in figures.items()}
    for name, f in figures.items():
        print(f"{name:<8} median ratio {f['median']:.3f} (min {f['min']:.3f}, max {f['max']:.3f}, "
              f"spread {f['spread']:.0%}) over {args.repeats} rounds")  # fmt: skip
    print(
        f"measured in {time.perf_counter() - t0:.0f} s"
        + (f" with a {slowdown}x injected slowdown" if slowdown > 1 else "")
    )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"figures": figures, "slowdown": slowdown}, indent=1))
    if args.write_baseline:
        import platform

        medians = {k: round(v, 4) for k, v in current.items()}
        data = {"machine": platform.processor() or platform.machine(), "repeats": args.repeats,
                "written": time.strftime("%Y-%m-%d"), "median_ratio": medians}  # fmt: skip
        pathlib.Path(args.baseline).write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.baseline}")
        return 0
    baseline = json.loads(pathlib.Path(args.baseline).read_text())["median_ratio"]
    failures = compare(current, baseline, args.threshold)
    for line in failures:
        print("SLOWER:", line)
    if args.self_test:
        caught = {line.split(":")[0] for line in failures}
        if caught != set(baseline):
            print(f"self-test FAILED: the injected 2x slowdown was caught only in {sorted(caught)}")
            return 1
        print("self-test passed: the injected 2x slowdown fails every case")
        return 0
    print("gate passed" if not failures else "gate FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
