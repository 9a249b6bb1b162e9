"""Reward against wall-clock per algorithm on the tiny CPU quickstart: FlowGRPO, DiffusionNFT, MixGRPO, DanceGRPO,
GRPO-Guard, online Diffusion-DPO, Flow-DPPO.

Each algorithm is one `verl-omni-train` run (`--config-name quickstart`: tiny random Qwen-Image, 4 prompts x 8
images, LoRA r8, lr 7e-3, jpeg-compressibility reward, fp32, no CFG, no KL) of `--steps` seeded steps with only the
overrides of its example quickstart script (`examples/<algo>/run_quickstart_*.sh`, listed in `ALGORITHMS`), one
after the other in this process (each starts and stops its own local Ray). From each run folder's `metrics.jsonl`:

    s/step              the median `timing_s/step` over the steps after the first (the first compiles and warms up),
                        and the minimum (the least disturbed step when other processes share the cores)
    vs FlowGRPO         minimum s/step over FlowGRPO's, in the same command: the cost per step relative to FlowGRPO
                        (the minimum, because on a shared machine the median moves with the load: FlowGRPO and
                        Flow-DPPO run the same passes)
    reward @ budget     the mean reward of the last 3 steps finished within the budget, the summed `timing_s/step`
                        of the shortest run (every algorithm has reached it); images/s and the learning margin
                        (`report.learning_margin`, last 3 steps minus first 3 in standard errors) of the whole run

The chart plots each run's per-step mean reward against its cumulative step time (`timing_s/step` summed; Ray
start-up and the model load are outside the steps) with the budget marked. These are CPU figures on a model of a
few thousand parameters, where fixed per-step work (reward, weight sync, Ray calls) weighs far more than on a GPU;
the H200 figures come from `bench_trainer_run.py` (`gpu_suite.sh trainer-run-algos`).

    python benchmarks/bench_algorithms_cpu.py --out docs/assets/benchmarks        # all 7, 12 steps: ~6 min on 2 cores
    python benchmarks/bench_algorithms_cpu.py --algorithms flow_grpo,diffusion_nft --steps 4 --out /tmp/algos
    python benchmarks/bench_algorithms_cpu.py --reuse --out docs/assets/benchmarks   # re-summarize the run folders
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # sibling modules, when run as a script

ALGORITHMS: dict[str, tuple[str, list[str]]] = {
    "flow_grpo": ("FlowGRPO", []),
    "diffusion_nft": ("DiffusionNFT", ["actor_rollout_ref.model.algorithm=diffusion_nft"]),
    "mix_grpo": ("MixGRPO", ["actor_rollout_ref.rollout.algo.sample_strategy=progressive",
                             "actor_rollout_ref.rollout.algo.sde_window_size=2",
                             "actor_rollout_ref.rollout.algo.sde_window_range=[0,3]",
                             "actor_rollout_ref.rollout.algo.iters_per_group=4"]),
    "dance_grpo": ("DanceGRPO", ["actor_rollout_ref.rollout.algo.init_same_noise=true",
                                 "algorithm.timestep_fraction=0.7"]),
    "grpo_guard": ("GRPO-Guard", ["actor_rollout_ref.actor.diffusion_loss.loss_mode=grpo_guard"]),
    "dpo": ("Online DPO", ["actor_rollout_ref.model.algorithm=dpo"]),
    "flow_dppo": ("Flow-DPPO", ["actor_rollout_ref.actor.diffusion_loss.loss_mode=flow_dppo"]),
}  # fmt: skip
"""Algorithm -> (label, the overrides of its example quickstart script on top of `--config-name quickstart`)."""

LAST_K = 3  # steps averaged for the reward at the budget


def run_algorithm(name: str, run_dir: pathlib.Path, steps: int) -> dict[str, Any]:
    """One quickstart run of `steps` steps with `ALGORITHMS[name]`'s overrides; its exit status, wall time and rows."""
    from bench_trainer_run import wait_for_no_children

    from verl_omni.trainer.main import run
    from verl_omni.trainer.report import read_metrics

    if run_dir.exists():
        shutil.rmtree(run_dir)
    argv = ["--config-name", "quickstart", *ALGORITHMS[name][1], f"trainer.total_training_steps={steps}",
            "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.save_freq=-1",
            "trainer.resume_mode=disable", "trainer.logger=[console]", f"trainer.experiment_name=bench_{name}",
            f"trainer.run_dir={run_dir}", f"trainer.default_local_dir={run_dir / 'checkpoints'}"]  # fmt: skip
    t0 = time.perf_counter()
    rc = run(argv)
    wall = time.perf_counter() - t0
    return {"overrides": ALGORITHMS[name][1], "rc": rc, "wall_s": round(wall, 1),
            "rows": read_metrics(run_dir / "metrics.jsonl"), "leftover_processes": wait_for_no_children()}  # fmt: skip


def reuse_run(name: str, run_dir: pathlib.Path) -> dict[str, Any]:
    """The `run_algorithm` entry of a finished run folder (`--reuse`); its wall time is not known."""
    from verl_omni.trainer.report import read_metrics

    rows = read_metrics(run_dir / "metrics.jsonl")
    return {"overrides": ALGORITHMS[name][1], "rc": 0 if rows else 1, "wall_s": None, "rows": rows,
            "leftover_processes": {}}  # fmt: skip


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-step seconds (cumulative), rewards, s/step (median after step 1), images/s and the learning margin."""
    from verl_omni.trainer.report import learning_margin

    step_s = [r["timing_s/step"] for r in rows]
    cumulative = [round(sum(step_s[: i + 1]), 3) for i in range(len(step_s))]
    median = statistics.median(step_s[1:] or step_s)
    margin = learning_margin(rows)
    return {
        "step_s": round(median, 4),
        "min_step_s": round(min(step_s[1:] or step_s), 4),
        "images_per_s": round(rows[0]["perf/images_per_step"] / median, 3),
        "cumulative_s": cumulative,
        "reward_mean": [round(r["critic/rewards/mean"], 6) for r in rows],
        "margin_se": None if margin is None else round(margin["margin"], 2),
    }


def reward_at(entry: dict[str, Any], budget: float) -> float:
    """The mean reward of the last `LAST_K` steps finished within `budget` seconds of summed step time."""
    done = [r for r, t in zip(entry["reward_mean"], entry["cumulative_s"], strict=True) if t <= budget + 1e-9]
    return statistics.fmean(done[-LAST_K:])


def chart(results: dict[str, Any], path: pathlib.Path) -> pathlib.Path:
    """Reward vs cumulative step seconds, one line per algorithm, the budget as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.6), dpi=100)
    for name, entry in results["algorithms"].items():
        if "cumulative_s" in entry:
            label = f"{ALGORITHMS[name][0]} (min {entry['min_step_s']:.2f} s/step)"
            ax.plot(entry["cumulative_s"], entry["reward_mean"], marker="o", markersize=3, label=label)
    ax.axvline(results["budget_s"], color="grey", linestyle="--", linewidth=1)
    ax.text(results["budget_s"], ax.get_ylim()[0], " budget", color="grey", va="bottom")
    ax.set_xlabel("seconds of training steps (summed timing_s/step)")
    ax.set_ylabel("mean jpeg-compressibility reward")
    ax.set_title(f"Reward vs step time, tiny quickstart, {results['steps']} steps\n{results['machine']}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"comma list of {'|'.join(ALGORITHMS)}")
    parser.add_argument("--steps", type=int, default=12, help="training steps per algorithm (>= 6 for the margin)")
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    parser.add_argument("--reuse", action="store_true", help="summarize the run folders in --out/runs, train nothing")
    args = parser.parse_args(argv)
    names = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    unknown = [a for a in names if a not in ALGORITHMS]
    if unknown or "flow_grpo" not in names:
        raise SystemExit(f"--algorithms: unknown {unknown} or flow_grpo missing (the ratios are against it); "
                         f"choose from {', '.join(ALGORITHMS)}")  # fmt: skip
    if args.steps < 2:
        raise SystemExit(f"--steps: expected an int >= 2 (step 1 warms up), got {args.steps}")
    os.environ.pop("RAY_ADDRESS", None)  # every run gets a private local Ray
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"steps": args.steps, "algorithms": {}}
    for name in names:
        run_dir = out / "runs" / f"algos_cpu_{name}"
        done = reuse_run(name, run_dir) if args.reuse else run_algorithm(name, run_dir, args.steps)
        entry = {k: v for k, v in done.items() if k != "rows"}
        ok = done["rc"] == 0 and len(done["rows"]) == args.steps
        entry.update(summarize(done["rows"]) if ok else {"error": f"rc={done['rc']}, {len(done['rows'])} rows"})
        results["algorithms"][name] = entry
    good = {n: e for n, e in results["algorithms"].items() if "cumulative_s" in e}
    base = good.get("flow_grpo")
    results["budget_s"] = min(e["cumulative_s"][-1] for e in good.values()) if good else 0.0
    for entry in good.values():
        entry["reward_at_budget"] = round(reward_at(entry, results["budget_s"]), 6)
        if base is not None:
            entry["vs_flow_grpo_step_s"] = round(entry["min_step_s"] / base["min_step_s"], 3)
    import torch
    from trainer_workload_parts import machine_name

    results["machine"] = machine_name(torch.device("cpu"))
    (out / "algorithms_cpu.json").write_text(json.dumps(results, indent=1))
    png = chart(results, out / "algorithms_cpu.png") if good else None
    print(f"\n{args.steps} steps each, budget {results['budget_s']:.1f} s of step time ({results['machine']})")
    for name, e in results["algorithms"].items():
        if "error" in e:
            print(f"{ALGORITHMS[name][0]:<14} ERROR {e['error']}")
            continue
        print(f"{ALGORITHMS[name][0]:<14} {e['step_s']:6.2f} s/step (min {e['min_step_s']:.2f})  "
              f"x{e.get('vs_flow_grpo_step_s', float('nan')):.2f} "
              f"FlowGRPO  reward@budget {e['reward_at_budget']:.4f}  margin {e['margin_se']} se")  # fmt: skip
    print(f"wrote {out / 'algorithms_cpu.json'} and {png}")
    if len(good) < len(names):
        raise SystemExit(f"failed: {', '.join(n for n in names if n not in good)}")
    return results


if __name__ == "__main__":
    main()
