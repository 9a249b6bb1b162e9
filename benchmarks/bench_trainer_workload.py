"""Trainer workload benchmark (issue 10, workload A): a flow_grpo-style SD3 loop vs this project's pieces.

One process, one device, the same random SD3 pipeline folder for both implementations:

* workload `a`: a random SD3 transformer of 12 layers, 24 heads x 64 (d = 1536), joint attention dim 4096
  (about 1.0 B parameters), 512x512, 10 steps, SDE noise level 0.7 at every step, CFG 4.5 in rollout and in
  training, LoRA r32 / alpha 64 on the 8 attention projections of flow_grpo's SD3 recipe, every step but the last
  trained, KL beta 0.04 against the adapter-disabled model, bf16, 16 images per step (2 prompts x 8),
  jpeg-compressibility reward, AdamW lr 3e-4, clip ratio 1e-4. Text encoders and VAE are small random ones
  (their cost is under-weighted against a real SD3: the transformer dominates both implementations alike).
* `baseline`: written here in the style of flow_grpo's `train_sd3.py` (not its code): the stock diffusers
  `StableDiffusion3Pipeline` (bf16) with a peft `get_peft_model` LoRA, a Python sampling loop that calls an SDE
  step with log-prob after each CFG forward, rollout log-probs reused as the old ones, and a plain bf16-autocast
  training loop over the trained steps with the reference forward (`disable_adapter()`) interleaved, one
  optimizer step per batch; no FSDP.
* `project`: `DiffusersRolloutEngine.generate` (trajectory with log-probs), jpeg reward and group advantages,
  `DiffusersFSDPEngine.compute_log_prob` (old log-probs) / `compute_ref_log_prob` (KL reference) /
  `update_policy`, then LoRA export (`export_weights`, cast on the device, straight to the rollout engine's
  device: no host hop on one GPU) into the rollout engine (`update_weights`). Variants:
  `recompute` (old log-probs recomputed, the trainer default), `reuse` (the rollout's bf16 log-probs stand in
  for the old ones), `fused` (the update takes the old log-probs from its own first forward, exact when the
  update is on-policy: one mini-batch, one epoch), and `+compile` (each transformer block compiled).

Reported: images/s end to end per implementation and variant and their ratio to the baseline, time per stage,
sampling time against the stock diffusers pipeline (`pipe(...)`) (in the step, and `generate` alone with the
synced adapter merged into the base weights, the default, and unmerged in the forward), step-1 `pg_clipfrac` and the
|old - rollout| log-prob gap, peak memory. JSON and a bar chart PNG go to `--out`.

    python benchmarks/bench_trainer_workload.py --device cuda --out "$OUT"        # H200, workload a
    python benchmarks/bench_trainer_workload.py --preset tiny --device cpu        # quick functional check
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # the sibling module below, when run as a script
from trainer_workload_parts import (
    PRESETS,
    PROMPTS,
    Clock,
    FlowGRPOBaseline,
    Workload,
    build_pipeline_folder,
    free_memory,
    generate_s,
    lora_targets,
    machine_name,
    median_times,
    peak_gib,
)

# variant suffixes: engine options
EXTRAS = {
    "compile": "torch.compile each transformer block (compile_blocks=True)",
    "cudnn": "diffusers attention backend _native_cudnn (model.attn_backend)",
    "keep": "fsdp_config.reshard_after_forward=false (no re-gather in backward; one device)",
}


# ---- (b) this project's pieces ----------------------------------------------------------------------------


class ProjectLoop:
    """Rollout engine + FSDP2 engine + LoRA weight sync, driven by hand through one FlowGRPO step."""

    def __init__(
        self, folder: pathlib.Path, w: Workload, device: torch.device, dtype: torch.dtype, compile_rollout: bool = False
    ) -> None:
        from verl_omni.pipelines import DiffusionSamplingConfig
        from verl_omni.rollout.diffusers.engine import DiffusersRolloutEngine

        self.folder, self.w, self.device, self.dtype = folder, w, device, dtype
        self.sampling = DiffusionSamplingConfig(
            n=w.n, num_inference_steps=w.steps, height=w.height, width=w.width, noise_level=w.noise_level,
            guidance_scale=w.guidance, negative_prompt="" if w.model == "sd3" else None,
            max_sequence_length=w.text_len, sde_window_size=w.window,
        )  # fmt: skip
        self.rollout = DiffusersRolloutEngine(
            folder, device=device, dtype=dtype, sampling=self.sampling, compile_blocks=compile_rollout
        )
        self.lora_config = {"r": w.lora_rank, "lora_alpha": w.lora_alpha, "init_lora_weights": "gaussian",
                            "target_modules": lora_targets(w)}  # fmt: skip
        self.engines: dict[frozenset[str], Any] = {}

    def engine(self, extras: frozenset[str]) -> Any:
        """The FSDP2 engine of a set of `EXTRAS` (built once; its LoRA is synced into the rollout engine)."""
        from verl_omni.config import DiffusionActorConfig, DiffusionModelConfig
        from verl_omni.engine import DiffusersFSDPEngine

        if extras not in self.engines:
            w = self.w
            actor = DiffusionActorConfig(
                rollout_n=w.n, ppo_mini_batch_size=len(PROMPTS),
                ppo_micro_batch_size_per_gpu=min(16, len(PROMPTS) * w.n),
                use_kl_loss=True, kl_loss_coef=w.kl_beta, optim={"lr": w.lr, "weight_decay": 1e-4},
                diffusion_loss={"clip_ratio": w.clip_ratio},
                fsdp_config={"dtype": str(self.dtype).removeprefix("torch."),
                             "reshard_after_forward": "keep" not in extras},
            )  # fmt: skip
            model = DiffusionModelConfig(
                path=str(self.folder), lora_rank=w.lora_rank, lora_alpha=w.lora_alpha,
                target_modules=lora_targets(w), enable_gradient_checkpointing=False,
                attn_backend="_native_cudnn" if "cudnn" in extras else None,
            )  # fmt: skip
            self.engines[extras] = DiffusersFSDPEngine.from_pretrained(
                model, actor, device=self.device, compile_blocks="compile" in extras
            )
            self.sync_weights(self.engines[extras])
        return self.engines[extras]

    def sync_weights(self, engine: Any) -> None:
        """Export the LoRA cast on the device straight to the rollout engine's device (one GPU: no host hop)."""
        weights = engine.export_weights(dtype=self.dtype, device=self.device)
        self.rollout.update_weights(weights, lora_config=self.lora_config)

    def step(self, seed: int, clock: Clock, mode: str, extras: frozenset[str]) -> dict[str, float]:
        """One FlowGRPO step; `mode` is how the old log-probs are obtained (recompute, reuse, fused)."""
        from verl_omni.algos import compute_flow_grpo_advantages
        from verl_omni.reward.jpeg import jpeg_compressibility

        engine = self.engine(extras)
        clock.start()
        traj = self.rollout.generate(PROMPTS, dataclasses.replace(self.sampling, seed=seed))
        clock.lap("gen")
        rewards = jpeg_compressibility(traj["images"])
        adv = compute_flow_grpo_advantages(rewards, traj["prompt_index"].cpu())
        batch = traj.exclude("images")
        batch["advantages"] = adv.to(batch.device)
        clock.lap("reward")
        if mode == "recompute":
            batch["old_log_probs"] = engine.compute_log_prob(batch)["old_log_probs"]
        elif mode == "reuse":
            batch["old_log_probs"] = batch["log_probs"].clone()
        clock.lap("old_log_prob")
        batch.update(engine.compute_ref_log_prob(batch))
        clock.lap("ref")
        metrics = engine.update_policy(batch)
        clock.lap("update")
        self.sync_weights(engine)
        clock.lap("weight_sync")
        return {k.removeprefix("actor/"): float(v) for k, v in metrics.items()}

    def logprob_gap(self, seed: int, extras: frozenset[str]) -> dict[str, float]:
        """|engine recompute - rollout| log-prob gap of one fresh rollout batch (untimed)."""
        engine = self.engine(extras)
        traj = self.rollout.generate(PROMPTS, dataclasses.replace(self.sampling, seed=seed)).exclude("images")
        old = engine.compute_log_prob(traj)["old_log_probs"].float()
        d = (old - traj["log_probs"].float().to(old.device)).abs()
        return {"logprob_gap_mean": d.mean().item(), "logprob_gap_max": d.max().item()}


# ---- driver -----------------------------------------------------------------------------------------------


def run_steps(fn, clock: Clock, warmup: int, iters: int) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Run `warmup + iters` steps; return the median stage times of the measured ones and every step's metrics."""
    measured, metrics = [], []
    for i in range(warmup + iters):
        clock.times = {}
        metrics.append(fn(i))
        times = dict(clock.times, step=sum(clock.times.values()))
        if i >= warmup:
            measured.append(times)
        else:
            metrics[-1]["warmup_step_s"] = times["step"]
    return median_times(measured), metrics


@contextlib.contextmanager
def phase(name: str, results: dict[str, Any], device: torch.device) -> Iterator[dict[str, Any]]:
    free_memory(device)
    entry: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        yield entry
    except Exception as e:  # keep the other phases' figures; the error is recorded and printed
        entry["error"] = f"{type(e).__name__}: {e}"
        print(f"[{name}] FAILED: {entry['error']}", flush=True)
        if os.environ.get("BENCH_RAISE"):
            raise
    entry["wall_s"] = round(time.perf_counter() - t0, 1)
    entry["peak_gib"] = peak_gib(device)
    results[name] = entry


def chart(results: dict[str, Any], path: pathlib.Path) -> bool:
    """Bar chart: images/s per implementation (left) and stacked stage times per step (right).

    Also redraws a chart from a saved JSON: `chart(json.load(open(path)), png_path)`.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [(k, v) for k, v in results["runs"].items() if "images_per_s" in v]
    if not rows:
        return False
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [k for k, _ in rows]
    colors = ["grey" if name == "baseline" else "tab:blue" for name in names]
    ax1.bar(names, [v["images_per_s"] for _, v in rows], color=colors)
    if results["preset"] == "a":
        ax1.axhline(4.6, color="tab:red", linestyle="--", linewidth=1, label="target 4.6 images/s")
        ax1.legend(fontsize=8, loc="lower right")
    ax1.set_ylabel("images / s (end to end)")
    ax1.set_title(f"workload {results['preset']}, {results['machine']}")
    for i, (_, v) in enumerate(rows):
        ax1.text(i, v["images_per_s"], f"{v['images_per_s']:.2f}", ha="center", va="bottom")
    stages = ["gen", "reward", "old_log_prob", "ref", "update", "weight_sync"]
    bottom = [0.0] * len(rows)
    for st in stages:
        vals = [v["stage_s"].get(st, 0.0) for _, v in rows]
        ax2.bar(names, vals, bottom=bottom, label=st)
        bottom = [b + x for b, x in zip(bottom, vals, strict=True)]
    ax2.set_ylabel("seconds per step (median)")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default=None, help="a on cuda, tiny on cpu")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="bfloat16 on cuda, float32 on cpu")
    parser.add_argument("--warmup", type=int, default=None, help="unmeasured steps per run (2 on cuda, 0 on cpu)")
    parser.add_argument("--iters", type=int, default=None, help="measured steps per run (3 on cuda, 1 on cpu)")
    parser.add_argument(
        "--variants",
        default="recompute,reuse,fused",
        help="recompute, reuse or fused, then optional +compile +cudnn +keep",
    )
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--folder", default=None, help="pipeline folder (built here when absent)")
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args(argv)
    import diffusers
    import transformers

    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()

    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", device.index or 0)
        torch.backends.cuda.matmul.allow_tf32 = True
    preset = args.preset or ("a" if device.type == "cuda" else "tiny")
    w = PRESETS[preset]
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    warmup = args.warmup if args.warmup is not None else (2 if device.type == "cuda" else 0)
    iters = args.iters if args.iters is not None else (3 if device.type == "cuda" else 1)
    images = len(PROMPTS) * w.n
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "preset": preset, "workload": dataclasses.asdict(w), "machine": machine_name(device),
        "torch": torch.__version__, "dtype": str(dtype), "images_per_step": images, "warmup": warmup,
        "iters": iters, "runs": {},
    }  # fmt: skip
    json_path = out / f"bench_trainer_workload_{device.type}_{preset}.json"

    def save() -> None:
        json_path.write_text(json.dumps(results, indent=1))

    with contextlib.ExitStack() as stack:
        if args.folder and (pathlib.Path(args.folder) / "model_index.json").exists():
            folder = pathlib.Path(args.folder)
        else:
            folder = pathlib.Path(args.folder or stack.enter_context(tempfile.TemporaryDirectory()))
            t0 = time.perf_counter()
            build_pipeline_folder(w, folder, dtype)
            results["build_s"] = round(time.perf_counter() - t0, 1)
        clock = Clock(device)
        n_params = None

        if w.model != "sd3":
            results["baseline_skipped"] = "the flow_grpo-style baseline is an SD3 loop"
        if not args.skip_baseline and w.model == "sd3":
            with phase("baseline", results["runs"], device) as entry:
                base = FlowGRPOBaseline(folder, w, device, dtype)
                n_params = sum(p.numel() for p in base.pipe.transformer.parameters())
                stock = []
                for i in range(warmup + iters):
                    clock.start()
                    base.stock_sample(100 + i)
                    clock.lap("stock")
                    if i >= warmup:
                        stock.append(clock.times.pop("stock"))
                    clock.times = {}
                results["stock_sampling_s"] = float(torch.tensor(stock).median())
                base.attach_lora()  # the same stock call with the LoRA adapter in the forward (as our rollout has)
                stock = []
                for i in range(1 + iters):
                    clock.start()
                    base.stock_sample(200 + i)
                    clock.lap("stock")
                    stock.append(clock.times.pop("stock"))
                results["stock_sampling_lora_s"] = float(torch.tensor(stock[1:]).median())
                stage, metrics = run_steps(lambda i: base.step(i, clock), clock, warmup, iters)
                entry.update(stage_s=stage, images_per_s=images / stage["step"],
                             step1_pg_clipfrac=metrics[0]["pg_clipfrac"], old_log_probs="rollout (reused)")  # fmt: skip
                entry["sampling_vs_stock"] = results["stock_sampling_s"] / stage["gen"]
                entry["sampling_vs_stock_lora"] = results["stock_sampling_lora_s"] / stage["gen"]
                del base
            save()

        loop = None
        for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
            mode, *extra = variant.split("+")
            extras = frozenset(extra)
            if mode not in ("recompute", "reuse", "fused") or not extras <= EXTRAS.keys():
                raise SystemExit(
                    f"--variants: unknown variant {variant!r}: recompute|reuse|fused, then +{'/+'.join(EXTRAS)}"
                )
            with phase(variant, results["runs"], device) as entry:
                clock.peaks = {}
                if loop is None:
                    loop = ProjectLoop(folder, w, device, dtype)
                    n_params = n_params or sum(p.numel() for p in loop.rollout.transformer.parameters())
                t0 = time.perf_counter()
                loop.engine(extras)
                entry["engine_build_s"] = round(time.perf_counter() - t0, 1)
                stage, metrics = run_steps(
                    lambda i, lp=loop, m=mode, x=extras: lp.step(1000 + i, clock, m, x), clock, warmup, iters
                )
                entry.update(stage_s=stage, images_per_s=images / stage["step"])
                entry["stage_share"] = {k: round(v / stage["step"], 4) for k, v in stage.items() if k != "step"}
                if clock.peaks:
                    entry["stage_peak_gib"] = dict(clock.peaks)
                entry["warmup_step_s"] = [round(m["warmup_step_s"], 2) for m in metrics if "warmup_step_s" in m]
                first = metrics[0]
                entry["step1"] = {k: first[k] for k in ("pg_clipfrac", "ratio_mean", "ppo_kl", "kl_loss") if k in first}
                entry["step1"].update(loop.logprob_gap(5000, extras))
                if "stock_sampling_s" in results:
                    entry["sampling_vs_stock"] = results["stock_sampling_s"] / stage["gen"]
                    entry["sampling_vs_stock_lora"] = results["stock_sampling_lora_s"] / stage["gen"]
                if "baseline" in results["runs"] and "images_per_s" in results["runs"]["baseline"]:
                    entry["vs_baseline"] = entry["images_per_s"] / results["runs"]["baseline"]["images_per_s"]
            save()

        if loop is not None:  # sampling alone: the synced adapter merged (the engine default) vs in the forward
            from verl_omni.rollout.diffusers.engine import DiffusersRolloutEngine

            with phase("sampling", results, device) as entry:
                unmerged = DiffusersRolloutEngine(folder, device=device, dtype=dtype, merge_lora=False)
                unmerged.update_weights(loop.rollout.weight_table(lora=True), lora_config=loop.lora_config)
                for name, rollout in (("merged", loop.rollout), ("unmerged", unmerged)):
                    sec = generate_s(rollout, loop.sampling, clock, warmup, iters)
                    stock = {"vs_stock": "stock_sampling_s", "vs_stock_lora": "stock_sampling_lora_s"}
                    ratios = {k: results[v] / sec for k, v in stock.items() if v in results}
                    entry[f"project generate, adapter {name}"] = {"s": sec, **ratios}
                del unmerged
            save()

    results["transformer_params"] = n_params
    results["chart"] = str(out / f"bench_trainer_workload_{device.type}_{preset}.png")
    if not chart(results, pathlib.Path(results["chart"])):
        results["chart"] = None
    save()
    print_table(results)
    print_shares(results)
    print(f"wrote {json_path}" + (f" and {results['chart']}" if results["chart"] else ""))
    return results


def print_shares(results: dict[str, Any]) -> None:
    """Each run's stage shares of the step, on CUDA the peak memory of each stage; `generate` alone vs stock."""
    for name, r in results.get("sampling", {}).items():
        if isinstance(r, dict):
            print(f"{name}: {r['s']:.3f} s, x{r.get('vs_stock', float('nan')):.2f} stock, "
                  f"x{r.get('vs_stock_lora', float('nan')):.2f} stock + peft LoRA")  # fmt: skip
    for name, r in results["runs"].items():
        if "stage_share" in r:
            shares = ", ".join(f"{k} {100 * v:.1f}%" for k, v in r["stage_share"].items())
            print(f"{name}: {shares}")
        if r.get("stage_peak_gib"):
            print(f"{name} peak GiB per stage: {r['stage_peak_gib']}")


def print_table(results: dict[str, Any]) -> None:
    stages = ["gen", "reward", "old_log_prob", "ref", "update", "weight_sync", "step"]
    print(f"\nworkload {results['preset']} on {results['machine']} ({results['dtype']}), "
          f"{results['images_per_step']} images/step; stock sampling {results.get('stock_sampling_s')} s, "
          f"with the LoRA adapter {results.get('stock_sampling_lora_s')} s")  # fmt: skip
    head = f"{'run':<20}{'img/s':>7}{'x base':>8}{'samp/stock':>11}{'/stock+lora':>12}"
    print(head + "".join(f"{s:>13}" for s in stages)
          + f"{'clipfrac1':>10}{'gap mean':>10}{'peak GiB':>9}")  # fmt: skip
    for name, r in results["runs"].items():
        if "error" in r:
            print(f"{name:<20} ERROR {r['error'][:200]}")
            continue
        st = r["stage_s"]
        s1 = r.get("step1", {"pg_clipfrac": r.get("step1_pg_clipfrac")})
        print(f"{name:<20}{r['images_per_s']:>7.2f}{r.get('vs_baseline', 1.0):>8.2f}"
              f"{r.get('sampling_vs_stock', float('nan')):>11.2f}{r.get('sampling_vs_stock_lora', float('nan')):>12.2f}"
              + "".join(f"{st.get(s, 0.0):>13.3f}" for s in stages)
              + f"{s1.get('pg_clipfrac') or 0:>10.3f}{s1.get('logprob_gap_mean', float('nan')):>10.2e}"
              f"{r.get('peak_gib') or 0:>9.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
