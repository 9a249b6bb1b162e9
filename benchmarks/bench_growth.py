"""How a FlowGRPO step's cost grows with the work: per-stage images/s and peak memory against resolution, model
width, group size and images per step, the fitted growth per doubling, and the largest images/step that fits.

The pieces, not the trainer (fast): `bench_trainer_workload.ProjectLoop`'s rollout engine (`generate`) and FSDP2
engine (`compute_ref_log_prob`, `update_policy` with the rollout's log-probs as the old ones, one optimizer step
per step) in this process, on a random pipeline folder of each model, eager (a compiled engine recompiles for every
new shape; the growth ratios are the point). Per model (`--models`; on CUDA `a` = workload A's 1.0 B SD3 with CFG,
`b` = the 2.8 B Qwen-Image width of workload B without CFG, window 2; on the CPU the `tiny` presets), the points:

    resolution   side 256, 512, 1024 at 8 images/step (2 prompts x 4)       (CPU: 32, 64, 128 at 4 images)
    images       8, 16, 32, 64 images/step at 512 (2 prompts x n)          (CPU: 2, 4, 8 at 64)
    group        n = 2, 4, 8 at 16 images/step (16 / n prompts)             (CPU: n = 1, 2, 4 at 4 images)

each timed as the median of `--iters` steps after one warm-up. Each stage's growth is the least-squares slope of
log2(seconds per step) against log2(x): "x 2^slope per doubling" of the side length, of the images, of n. The
largest images/step that fits is extrapolated from a straight-line fit of each stage's peak memory against the
images (both engines resident, as the awake colocated trainer; the rollout's sleep frees more in the real run)
up to 95 % of the device's memory: it is a fit, not a run. Width compares the two models at the same point.

    python benchmarks/bench_growth.py --device cuda --models a --out "$OUT"     # H200, ~5 min a model
    python benchmarks/bench_growth.py --chart a.json b.json --out docs/assets/benchmarks   # charts of both
    python benchmarks/bench_growth.py --device cpu --preset tiny               # CPU check, ~1 min
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import pathlib
import statistics
import sys
import tempfile
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # sibling modules, when run as a script
import torch
from trainer_workload_parts import PRESETS, PROMPTS, Clock, build_pipeline_folder, free_memory, machine_name

STAGES = ("gen", "ref", "update_actor")
SWEEPS = {  # name -> (x label, points as (side, prompts, n))
    "cuda": {
        "resolution": ("side (px)", [(s, 2, 4) for s in (256, 512, 1024)]),
        "images": ("images per step", [(512, 2, i // 2) for i in (8, 16, 32, 64)]),
        "group": ("group size n", [(512, 16 // n, n) for n in (2, 4, 8)]),
    },
    "cpu": {
        "resolution": ("side (px)", [(s, 2, 2) for s in (32, 64, 128)]),
        "images": ("images per step", [(64, 2, i // 2) for i in (2, 4, 8)]),
        "group": ("group size n", [(64, 4 // n, n) for n in (1, 2, 4)]),
    },
}
MODELS = {"cuda": {"a": "a", "b": "b"}, "cpu": {"tiny": "tiny", "tiny-qwen": "tiny-qwen"}}


def _x(sweep: str, point: tuple[int, int, int]) -> float:
    side, prompts, n = point
    return {"resolution": side, "images": prompts * n, "group": n}[sweep]


def prompts_of(count: int) -> list[str]:
    """`count` distinct prompts (the two benchmark prompts, then numbered variants)."""
    return [PROMPTS[i % len(PROMPTS)] + ("" if i < len(PROMPTS) else f", variant {i}") for i in range(count)]


def run_point(loop: Any, engine: Any, point: tuple[int, int, int], seed: int) -> dict[str, Any]:
    """One step at `point` = (side, prompts, n): seconds and peak GiB per stage."""
    from verl_omni.algos import compute_flow_grpo_advantages

    side, prompts, n = point
    engine.config = engine.config.evolve(rollout_n=n, ppo_mini_batch_size=prompts)  # one optimizer step per step
    sampling = dataclasses.replace(loop.sampling, height=side, width=side, n=n, seed=seed)
    clock = Clock(loop.device)
    clock.start()
    traj = loop.rollout.generate(prompts_of(prompts), sampling)
    clock.lap("gen")
    batch = traj.exclude("images")
    rewards = torch.linspace(0, 1, batch.batch_size[0])  # the reward's value does not change the cost
    batch["advantages"] = compute_flow_grpo_advantages(rewards, traj["prompt_index"].cpu()).to(batch.device)
    batch["old_log_probs"] = batch["log_probs"].clone()
    clock.start()
    batch.update(engine.compute_ref_log_prob(batch))
    clock.lap("ref")
    engine.update_policy(batch)
    clock.lap("update_actor")
    return {"s": dict(clock.times), "peak_gib": dict(clock.peaks)}


def measure_model(name: str, device: torch.device, iters: int) -> dict[str, Any]:
    """Every point of every sweep on model preset `name` (points shared by sweeps run once)."""
    from bench_trainer_workload import ProjectLoop

    w = PRESETS[name]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    points = sorted({p for _, pts in SWEEPS[device.type].values() for p in pts})
    out: dict[str, Any] = {"preset": name, "workload": w.__dict__, "points": {}}
    with tempfile.TemporaryDirectory(prefix="bench_growth_") as tmp:
        folder = pathlib.Path(tmp) / "pipeline"
        build_pipeline_folder(w, folder, dtype)
        loop = ProjectLoop(folder, w, device, dtype)
        engine = loop.engine(frozenset())
        out["params_m"] = round(sum(p.numel() for p in engine.module.parameters()) / 1e6, 2)
        for point in points:
            key = ",".join(map(str, point))
            try:
                runs = [run_point(loop, engine, point, seed) for seed in range(1 + iters)][1:]  # one warm-up
            except torch.OutOfMemoryError as e:  # the point does not fit: recorded, the others still run
                out["points"][key] = {"side": point[0], "prompts": point[1], "n": point[2], "error": str(e)[:200]}
                print(f"[{name}] {point}: out of memory", flush=True)
                free_memory(device)
                continue
            s = {k: statistics.median(r["s"][k] for r in runs) for k in STAGES}
            peaks = {k: max(r["peak_gib"].get(k, 0.0) for r in runs) for k in STAGES} if device.type == "cuda" else {}
            images = point[1] * point[2]
            out["points"][key] = {
                "side": point[0], "prompts": point[1], "n": point[2], "images": images, "s": s,
                "images_per_s": {k: images / v for k, v in s.items()}, "peak_gib": peaks,
            }  # fmt: skip
            print(f"[{name}] {point[0]}², {point[1]} prompts x {point[2]}: "
                  + ", ".join(f"{k} {v:.3f}s" for k, v in s.items()) + (f"  peak {peaks}" if peaks else ""),
                  flush=True)  # fmt: skip
        del loop, engine
    free_memory(device)
    return out


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log2(y) against log2(x)."""
    lx, ly = [math.log2(x) for x in xs], [math.log2(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    den = sum((a - mx) ** 2 for a in lx)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / den if den else float("nan")


def growth(model: dict[str, Any], device: str, memory_gib: float | None) -> dict[str, Any]:
    """Per sweep and stage: `x 2^slope` per doubling; the largest images/step that fits (linear peak-memory fit)."""
    out: dict[str, Any] = {}
    for sweep, (_, pts) in SWEEPS[device].items():
        ok = [p for p in pts if "s" in model["points"][",".join(map(str, p))]]
        rows = [model["points"][",".join(map(str, p))] for p in ok]
        xs = [_x(sweep, p) for p in ok]
        if len(rows) < 2:
            out[sweep] = dict.fromkeys(STAGES)
            continue
        out[sweep] = {k: round(2 ** slope(xs, [r["s"][k] for r in rows]), 3) for k in STAGES}
    if (
        memory_gib
        and len([p for p in SWEEPS[device]["images"][1] if "s" in model["points"][",".join(map(str, p))]]) > 1
    ):
        rows = [model["points"][",".join(map(str, p))] for p in SWEEPS[device]["images"][1]]
        rows = [r for r in rows if "s" in r]
        fits = {}
        for k in STAGES:
            xs, ys = [r["images"] for r in rows], [r["peak_gib"][k] for r in rows]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            per_image = sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / sum((a - mx) ** 2 for a in xs)
            base = my - per_image * mx
            largest = int((0.95 * memory_gib - base) / per_image) if per_image > 0 else None
            fits[k] = {"gib_per_image": round(per_image, 4), "base_gib": round(base, 2), "largest_images": largest}
        out["memory_fit"] = fits
        bounded = [f["largest_images"] for f in fits.values() if f["largest_images"] is not None]
        out["largest_images_per_step"] = min(bounded) if bounded else None
    return out


def charts(results: list[dict[str, Any]], out: pathlib.Path) -> list[str]:
    """One PNG per sweep: seconds per step of each stage against x (log-log), every model; peak memory beside."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    device = results[0]["device"]
    for sweep, (label, pts) in SWEEPS[device].items():
        fig, (ax, axm) = plt.subplots(1, 2, figsize=(11, 4))
        for res in results:
            for name, model in res["models"].items():
                ok = [p for p in pts if "s" in model["points"][",".join(map(str, p))]]
                rows = [model["points"][",".join(map(str, p))] for p in ok]
                xs = [_x(sweep, p) for p in ok]
                for k, style in zip(STAGES, ("-o", "--s", ":^"), strict=True):
                    g = model["growth"][sweep][k]
                    per = f" (x{g:.2f}/doubling)" if g is not None else ""
                    ax.plot(xs, [r["s"][k] for r in rows], style, label=f"{name} {k}{per}")
                    if rows and rows[0]["peak_gib"]:
                        axm.plot(xs, [r["peak_gib"][k] for r in rows], style, label=f"{name} {k}")
        for a in (ax, axm):
            a.set_xscale("log", base=2)
            a.set_xlabel(label)
            a.grid(alpha=0.3)
        ax.set_yscale("log", base=2)
        ax.set_ylabel("seconds per step")
        axm.set_ylabel("peak GiB allocated")
        ax.legend(fontsize=7)
        if axm.lines:
            axm.legend(fontsize=7)
        fig.suptitle(f"FlowGRPO step pieces vs {label} ({results[0]['machine']})")
        fig.tight_layout()
        path = out / f"growth_{sweep}_{device}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(str(path))
    return written


def print_report(res: dict[str, Any]) -> None:
    print(f"\ngrowth per doubling on {res['machine']} (seconds per step; eager engines)")
    for name, model in res["models"].items():
        print(f"model {name} ({model['params_m']} M params)")
        for sweep in SWEEPS[res["device"]]:
            print(f"  {sweep:<11}" + ", ".join(f"{k} x{v}" for k, v in model["growth"][sweep].items()))
        if model["growth"].get("largest_images_per_step") is not None:
            largest = model["growth"]["largest_images_per_step"]
            print(f"  largest images/step that fits (linear fit of peak memory): {largest}")
    names = list(res["models"])
    if len(names) != 2:
        return
    a, b = (res["models"][n] for n in names)
    common = sorted(p for p in set(a["points"]) & set(b["points"]) if "s" in a["points"][p] and "s" in b["points"][p])
    if common:
        ratio = {k: statistics.median(b["points"][p]["s"][k] / a["points"][p]["s"][k] for p in common) for k in STAGES}
        res["width_ratio"] = {"models": names, "params_m": [a["params_m"], b["params_m"]], "median_s_ratio": ratio}
        print(f"width: {names[1]} / {names[0]} seconds, median over the points: "
              + ", ".join(f"{k} x{v:.2f}" for k, v in ratio.items()))  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None)
    parser.add_argument("--preset", choices=["tiny"], default=None, help="tiny: the CPU presets (the CPU default)")
    parser.add_argument("--models", default=None, help="comma list of presets (cuda: a,b; cpu: tiny,tiny-qwen)")
    parser.add_argument("--iters", type=int, default=None, help="measured steps per point (2 on cuda, 1 on cpu)")
    parser.add_argument("--chart", nargs="*", default=None, help="only draw the charts of these result JSONs")
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.chart:
        results = [json.loads(pathlib.Path(p).read_text()) for p in args.chart]
        merged = dict(results[0], models={k: v for r in results for k, v in r["models"].items()})
        print_report(merged)
        merged["charts"] = charts([merged], out)
        path = out / f"growth_{merged['device']}_{'_'.join(merged['models'])}.json"
        path.write_text(json.dumps(merged, indent=1, default=str))
        print(f"wrote {path} and {', '.join(merged['charts'])}")
        return merged
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    kind = "cpu" if args.preset == "tiny" or device.type == "cpu" else "cuda"
    if device.type == "cuda":
        device = torch.device("cuda", 0)
    models = [m.strip() for m in (args.models or ",".join(MODELS[kind])).split(",") if m.strip()]
    iters = args.iters or (2 if kind == "cuda" else 1)
    memory = torch.cuda.get_device_properties(device).total_memory / 2**30 if device.type == "cuda" else None
    res: dict[str, Any] = {"device": kind, "machine": machine_name(device), "iters": iters, "memory_gib": memory,
                           "sweeps": {k: v[1] for k, v in SWEEPS[kind].items()}, "models": {}}  # fmt: skip
    for name in models:
        model = measure_model(name, device, iters)
        model["growth"] = growth(model, kind, memory)
        res["models"][name] = model
        one = out / f"growth_{kind}_{name}.json"  # each model as soon as it is measured (a timeout keeps it)
        one.write_text(json.dumps(dict(res, models={name: model}), indent=1, default=str))
        print(f"wrote {one}", flush=True)
    print_report(res)
    path = out / f"growth_{kind}_{'_'.join(models)}.json"
    path.write_text(json.dumps(res, indent=1, default=str))
    res["charts"] = charts([res], out)
    path.write_text(json.dumps(res, indent=1, default=str))
    print(f"wrote {path} and {', '.join(res['charts'])}")
    return res


if __name__ == "__main__":
    main()
