"""The real trainer (`verl-omni-train`) end to end on issue 10's workloads, per stage, against the flow_grpo-style loop.

Each variant is one run of `verl_omni.trainer.main.run(argv)` in this process (its own private local Ray, actor
rank, colocated `DiffusersHttpServer`, sleep/wake, LoRA sync over HTTP), `W + N` steps; the figures come from the
run folder's `metrics.jsonl` (the median over the `N` measured steps). After every variant the benchmark checks that
Ray and the servers are gone (no child process left; leftovers are named, then terminated by pid). The
flow_grpo-style baseline (`trainer_workload_parts.FlowGRPOBaseline`, same pipeline folder) runs last, in this
process, once the trainer variants have released the device.

Workload fields (`trainer_workload_parts.Workload`) -> overrides of the `diffusion_trainer` config:

    layers, heads, head_dim, joint_dim, clip_dims  -> the random pipeline folder (build_pipeline_folder) = model.path
    height, width, steps, text_len                 -> rollout.pipeline.height / width / num_inference_steps /
                                                      max_sequence_length
    n, 2 prompts                                   -> rollout.n, data.train_batch_size=2 (a jsonl of PROMPTS),
                                                      actor.ppo_mini_batch_size=2 (one optimizer step per step)
    guidance                                       -> rollout.pipeline.guidance_scale (SD3, Wan: CFG; FLUX: the
                                                      distilled guidance) / true_cfg_scale (Qwen-Image); training
                                                      scores with the trajectory's CFG
    frames (Wan videos; 1 = images)                -> rollout.pipeline.num_frames
    noise_level, window (0 = all but the last)     -> rollout.algo.noise_level, rollout.algo.sde_window_size
    lora_rank, lora_alpha, lora_targets(w)         -> model.lora_rank / lora_alpha / target_modules (gaussian init)
    kl_beta                                        -> actor.use_kl_loss=true, actor.kl_loss_coef (LoRA: the
                                                      adapter-disabled model is the reference)
    clip_ratio, lr                                 -> actor.diffusion_loss.clip_ratio, actor.optim.lr
                                                      (weight_decay 1e-4 as bench_trainer_workload.ProjectLoop)
    bf16 (cuda) / fp32 (cpu)                       -> actor/ref fsdp_config.dtype, rollout.dtype
    jpeg reward                                    -> data_source jpeg_compressibility, reward.pool=thread

Not mapped one to one: the micro-batch (ProjectLoop's min(16, images) per forward, min(micro_batch, images)
here, is set as `actor.ppo_micro_batch_size_per_gpu`); the old log-probs follow the trainer's default (fused into
the on-policy update, = ProjectLoop's `fused`); the reward runs on 2 threads of the driver instead of inline; the
rollout's per-step SDE window start is the trainer's `pin_sde_window` draw (workload B) rather than the sampler default.

Timing keys the trainer logs (`timing_s/*`, each a wall-clock span in the driver): `gen`, `rollout_sleep`,
`reward` (here the step's exposed reward time, `timing_s/reward_exposed`; with `reward.stream` the whole reward
stage overlaps generation and is reported as the sub-stage `reward_whole`; a sleeping reward model's wake-up and
sleep are the sub-stages `reward_model_wake` / `reward_model_sleep`), `adv`, `old_log_prob` (absent when fused),
`ref`, `update_actor`, `update_weights` (= the rollout's wake-up + the export + the HTTP send + the version check),
its parts `rollout_wake`, `weight_export`, `weight_send`, and `gen_request_overhead` (the mean per request of the
client round trip minus the server's latency, i.e. trajectory transfer + codec; its `timing_share` is of the summed
round trips, so its share of the step is estimated as that share x gen / step).

    python benchmarks/bench_trainer_run.py --preset a --variants default,compile --out "$OUT"      # H200
    python benchmarks/bench_trainer_run.py --preset tiny --device cpu --steps 2 --warmup 1          # CPU, a minute
    python benchmarks/bench_trainer_run.py --preset a --variants compile,compile+2gpu --skip-baseline   # 2 GPUs
    python benchmarks/bench_trainer_run.py --preset a --variants default,nocfg,nft,dpo --skip-baseline   # algorithms
    python benchmarks/bench_trainer_run.py --preset flux --variants default --skip-baseline   # FLUX.1 / wan (issue 33)
    python benchmarks/bench_trainer_run.py --preset tiny-wan --device cpu                    # their CPU variants
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # sibling modules, when run as a script
from trainer_run_reward import (
    REWARD_MODELS,
    VARIANT_PARTS,
    build_reward_model,
    reward_model_overrides,
    write_ocr_prompts,
)
from trainer_workload_parts import PRESETS, PROMPTS, Workload, build_pipeline_folder, lora_targets

VARIANTS: dict[str, list[str]] = {
    "default": [],
    "compile": ["actor_rollout_ref.actor.fsdp_config.compile_blocks=true",
                "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false"],
    "keep": ["actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false"],
    "eager": ["actor_rollout_ref.actor.fsdp_config.compile_blocks=false",  # the actor's defaults before issue 29
              "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=true"],
    "awake": ["actor_rollout_ref.rollout.free_cache_engine=false"],
    "rcompile": ["actor_rollout_ref.rollout.engine_kwargs.diffusers.compile_blocks=true"],  # the rollout's blocks
    "eager-rollout": ["actor_rollout_ref.rollout.enforce_eager=true"],  # the rollout's blocks not compiled
    "coalesce": ["actor_rollout_ref.rollout.engine_kwargs.diffusers.coalesce=true"],
    "perprompt": ["actor_rollout_ref.rollout.agent.prompts_per_request=1"],  # the old one request per prompt
    "http": ["actor_rollout_ref.rollout.update_weights_transport=http"],  # weights over HTTP, not the shm segment
    "recompute": ["algorithm.rollout_correction.fuse_on_policy_old_log_prob=false"],
    "reuse": ["algorithm.rollout_correction.bypass_mode=true"],
    "vllm-omni": ["actor_rollout_ref.rollout.name=vllm_omni"],  # the vLLM-Omni backend (needs vllm-omni)
    # algorithms (docs/omni/algorithms.md), upstream's recipe keys on workload A's shape (steps, n, LoRA, lr kept)
    "nocfg": ["actor_rollout_ref.rollout.pipeline.guidance_scale=null",
              "actor_rollout_ref.rollout.pipeline.true_cfg_scale=1.0"],  # no CFG (any model): nft/dpo's rollout
    "nokl": ["actor_rollout_ref.actor.use_kl_loss=false",
             "actor_rollout_ref.actor.diffusion_loss.ref_kl_coef=0.0"],  # no reference forward (nft included)
    "nft": ["actor_rollout_ref.model.algorithm=diffusion_nft", "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.rollout.pipeline.guidance_scale=null",
            "actor_rollout_ref.rollout.pipeline.true_cfg_scale=1.0",
            "actor_rollout_ref.actor.diffusion_loss.mix_beta=0.1",
            "actor_rollout_ref.actor.diffusion_loss.ref_kl_coef=1e-4",  # the reference as FlowGRPO's KL: one forward
            "algorithm.old_policy_decay_schedule=delayed_linear_to_0_999", "algorithm.old_policy_update_interval=2"],
    "mix": ["actor_rollout_ref.rollout.algo.sample_strategy=random", "actor_rollout_ref.rollout.algo.sde_window_size=2",
            "actor_rollout_ref.rollout.algo.sde_window_seed=42",
            "actor_rollout_ref.rollout.algo.noise_level=1.2"],  # upstream's range [0, 5] left out: tiny has 3 steps
    "flash": ["actor_rollout_ref.rollout.algo.dpm_algorithm_type=dpmsolver++"],  # MixGRPO-Flash: with `mix`
    "dance": ["actor_rollout_ref.rollout.algo.init_same_noise=true", "algorithm.timestep_fraction=0.6"],
    "dpo": ["actor_rollout_ref.model.algorithm=dpo", "actor_rollout_ref.actor.use_kl_loss=false",
            "actor_rollout_ref.rollout.pipeline.guidance_scale=null",
            "actor_rollout_ref.rollout.pipeline.true_cfg_scale=1.0",
            "actor_rollout_ref.actor.diffusion_loss.dpo_beta=100.0"],  # the reference is always on
    "guard": ["actor_rollout_ref.actor.diffusion_loss.loss_mode=grpo_guard",
              "actor_rollout_ref.actor.diffusion_loss.clip_ratio=2e-6", "actor_rollout_ref.rollout.algo.sde_type=sde"],
    "dppo": ["actor_rollout_ref.actor.diffusion_loss.loss_mode=flow_dppo",
             "actor_rollout_ref.rollout.algo.sde_type=sde",
             "actor_rollout_ref.actor.ppo_mini_batch_size=1"],  # 2 optimizer steps a batch, as upstream's recipe
    **VARIANT_PARTS,  # stream, rm-vllm, rm-pool: the reward model's placement and reward streaming
}  # fmt: skip
"""Variant parts (join with `+`, e.g. `compile+awake`) -> extra overrides. A part `Ngpu` (e.g. `compile+2gpu`) runs
on N GPUs (N CPU ranks on the CPU) with N times the prompts per step, one optimizer step each, as weak scaling:
each device does the one-device run's work; its result carries `vs_1gpu`, against the same variant without it."""
GPU_PART = re.compile(r"^(\d+)gpu$")


def variant_overrides(name: str) -> list[str]:
    """The overrides of variant `name` (parts joined with `+`; see `VARIANTS` and `GPU_PART`)."""
    extra: list[str] = []
    for part in name.split("+"):
        match = GPU_PART.match(part)
        if match is None:
            extra += VARIANTS[part]
            continue
        gpus, prompts = int(match.group(1)), len(PROMPTS) * int(match.group(1))
        extra += [f"trainer.n_gpus_per_node={gpus}", f"data.train_batch_size={prompts}",
                  f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}"]  # fmt: skip
    return extra


def single_gpu_name(name: str) -> str | None:
    """`name` without its `Ngpu` part (None when it has none): the variant a scaling run is compared with."""
    parts = name.split("+")
    rest = [p for p in parts if not GPU_PART.match(p)]
    if len(rest) == len(parts):
        return None
    return "+".join(rest) or "default"


STAGES = ["gen", "rollout_sleep", "reward", "adv", "old_log_prob", "ref", "update_actor", "update_weights"]
"""The trainer's top-level timers inside `timing_s/step`, in step order (the rest of the step is `other`)."""


def workload_overrides(w: Workload, folder: pathlib.Path, prompts: pathlib.Path, device: str, dtype: str) -> list[str]:
    """The `diffusion_trainer` overrides of workload `w` (see the module docstring for the mapping)."""
    images = len(PROMPTS) * w.n
    targets = ",".join(f"'{t}'" for t in lora_targets(w))
    cfg_key = "true_cfg_scale" if w.model == "qwen_image" else "guidance_scale"  # FLUX: the distilled guidance
    arr = "actor_rollout_ref"
    return [
        f"{arr}.model.path={folder}",
        f"{arr}.model.lora_rank={w.lora_rank}",
        f"{arr}.model.lora_alpha={w.lora_alpha}",
        f"{arr}.model.target_modules=[{targets}]",
        f"{arr}.model.lora_init_weights=gaussian",
        f"{arr}.model.enable_gradient_checkpointing=false",
        f"{arr}.actor.ppo_mini_batch_size={len(PROMPTS)}",
        f"{arr}.actor.ppo_micro_batch_size_per_gpu={min(w.micro_batch, images)}",
        f"{arr}.actor.use_kl_loss=true",
        f"{arr}.actor.kl_loss_coef={w.kl_beta}",
        f"{arr}.actor.diffusion_loss.clip_ratio={w.clip_ratio}",
        f"{arr}.actor.optim.lr={w.lr}",
        f"{arr}.actor.optim.weight_decay=1e-4",
        f"{arr}.actor.fsdp_config.dtype={dtype}",
        f"{arr}.ref.fsdp_config.dtype={dtype}",
        f"{arr}.rollout.n={w.n}",
        f"{arr}.rollout.seed=0",
        f"{arr}.rollout.dtype={dtype}",
        f"{arr}.rollout.pipeline.height={w.height}",
        f"{arr}.rollout.pipeline.width={w.width}",
        f"{arr}.rollout.pipeline.num_inference_steps={w.steps}",
        f"{arr}.rollout.pipeline.num_frames={w.frames}",
        f"{arr}.rollout.pipeline.max_sequence_length={w.text_len}",
        f"{arr}.rollout.pipeline.{cfg_key}={w.guidance}",
        f"{arr}.rollout.algo.noise_level={w.noise_level}",
        f"{arr}.rollout.algo.sde_window_size={w.window or 'null'}",
        f"data.train_files={prompts}",
        f"data.train_batch_size={len(PROMPTS)}",
        "data.shuffle=false",
        "data.seed=0",
        "reward.pool=thread",
        "reward.num_workers=2",
        f"trainer.device={device}",
        "trainer.n_gpus_per_node=1",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.resume_mode=disable",
        "trainer.logger=[console]",
        "trainer.project_name=bench_trainer_run",
        *(["trainer.cpu_threads_per_worker=1"] if device == "cpu" else []),
    ]


def write_prompts(w: Workload, path: pathlib.Path, copies: int = 1) -> pathlib.Path:
    """The two benchmark prompts as jsonl, `copies` times in order (a step of `k` copies on `k` devices), routed to
    the jpeg reward (SD3 as flow_grpo, and Wan's CFG: empty negative prompt)."""
    rows = [{"prompt": p, "data_source": "jpeg_compressibility"} for p in PROMPTS] * copies
    if w.model in ("sd3", "wan"):
        rows = [dict(r, negative_prompt="") for r in rows]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---- processes ---------------------------------------------------------------------------------------------


def descendants(pid: int) -> dict[int, str]:
    """Every live descendant of `pid` (Linux /proc): pid -> command name."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
            if rest[0] == "Z":  # a zombie holds nothing
                continue
            children.setdefault(int(rest[1]), []).append(int(entry.name))
            names[int(entry.name)] = name
    found, todo = {}, list(children.get(pid, []))
    while todo:
        p = todo.pop()
        found[p] = names[p]
        todo.extend(children.get(p, []))
    return found


def wait_for_no_children(timeout_s: float = 60.0) -> dict[str, str]:
    """Wait until the trainer's Ray processes are gone; name and terminate (by pid) any left after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while (left := descendants(os.getpid())) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    return {str(pid): name for pid, name in left.items()}


# ---- one variant -------------------------------------------------------------------------------------------


def run_variant(name: str, base: list[str], run_dir: pathlib.Path, total: int) -> dict[str, Any]:
    """One `verl-omni-train` run of `total` steps; return its exit status, wall time and metrics rows."""
    from verl_omni.trainer.main import run

    extra = variant_overrides(name)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    argv = [
        "--config-name",
        "diffusion_trainer",
        *base,
        *extra,
        f"trainer.total_training_steps={total}",
        f"trainer.experiment_name={name}",
        f"trainer.run_dir={run_dir}",
        f"trainer.default_local_dir={run_dir / 'checkpoints'}",
    ]
    t0 = time.perf_counter()
    rc = run(argv)
    wall = time.perf_counter() - t0
    import ray

    if ray.is_initialized():  # the trainer shuts down the Ray it started; anything else is a leak
        ray.shutdown()
        print(f"[{name}] Ray was still initialised after the run: shut down")
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    return {"overrides": extra, "rc": rc, "wall_s": round(wall, 1), "rows": rows,
            "leftover_processes": wait_for_no_children()}  # fmt: skip


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if key in r]
    return float(statistics.median(vals)) if vals else None


def summarize(rows: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """images/s, median seconds and share per stage, sub-stages, peak memory and step-1 figures of a run."""
    measured = [r for r in rows if r["step"] > warmup]
    if not measured:
        return {"error": f"no measured step in metrics.jsonl ({len(rows)} rows, {warmup} warm-up)"}
    step = _median(measured, "timing_s/step")
    stage = {s: v for s in STAGES if (v := _median(measured, f"timing_s/{s}")) is not None}
    whole = stage.get("reward")
    if (exposed := _median(measured, "timing_s/reward_exposed")) is not None:
        stage["reward"] = exposed  # the step's share; with reward.stream the rest overlaps generation
    stage["other"] = max(step - sum(stage.values()), 0.0)
    sub = {k: v for k in ("rollout_wake", "weight_export", "weight_send", "gen_request_overhead",
                          "reward_model_wake", "reward_model_sleep")
           if (v := _median(measured, f"timing_s/{k}")) is not None}  # fmt: skip
    if whole is not None:
        sub["reward_whole"] = whole
    if "update_weights" in stage and {"rollout_wake", "weight_export", "weight_send"} <= sub.keys():
        parts = sub["rollout_wake"] + sub["weight_export"] + sub["weight_send"]
        sub["version_check_and_rest"] = max(stage["update_weights"] - parts, 0.0)
    over = _median(measured, "timing_share/gen_request_overhead")
    share = {k: round(v / step, 4) for k, v in stage.items()}
    share.update({f"update_weights/{k}": round(v / step, 4) for k, v in sub.items() if k != "gen_request_overhead"})
    if over is not None and "gen" in stage:
        share["gen_request_overhead (est.)"] = round(over * stage["gen"] / step, 4)
    # the trainer's model-FLOPs utilisation per stage and of the step (`verl_omni.trainer.flops`; CUDA only)
    mfu = {k.rsplit("/", 1)[-1]: v for k in sorted({k for r in measured for k in r if k.startswith("perf/mfu/")})
           if (v := _median(measured, k)) is not None}  # fmt: skip
    peaks = {
        k.rsplit("/", 1)[-1]: round(max(r[k] for r in measured if k in r), 2)
        for k in sorted({k for r in measured for k in r if k.startswith("perf/max_memory_allocated_gb/")})
    }
    first = rows[0]
    images = measured[0]["perf/images_per_step"]
    return {
        "images_per_step": images,
        "images_per_s": images / step,
        "step_s": step,
        "stage_s": stage,
        "stage_share": share,
        "sub_stage_s": sub,
        "gen_request_overhead_share_of_round_trip": over,
        "peak_gib": peaks,
        "mfu": mfu,
        "warmup_step_s": [round(r["timing_s/step"], 2) for r in rows if r["step"] <= warmup],
        "step1": {
            k.removeprefix("actor/"): first[k]
            for k in (
                "actor/pg_clipfrac",
                "actor/ratio_mean",
                "actor/ppo_kl",
                "actor/rollout_logprob_diff_max",
                "actor/rollout_logprob_diff_mean",
            )
            if k in first
        },
        "reward_mean": [round(r["critic/rewards/mean"], 5) for r in rows],
    }


# ---- the flow_grpo-style baseline --------------------------------------------------------------------------


def run_baseline(folder: pathlib.Path, w: Workload, device: str, dtype: str, warmup: int, steps: int) -> dict:
    """`FlowGRPOBaseline` (same folder) for `warmup + steps` steps in this process; median stage times."""
    import torch
    from trainer_workload_parts import Clock, FlowGRPOBaseline, free_memory, median_times

    dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
    if dev.type == "cuda":
        # the driver never touched CUDA (the trainer ran in Ray workers); the memory stats below need it
        torch.empty(1, device=dev)
    free_memory(dev)
    # the trainer's Ray workers have exited: (nearly) the whole device is free again
    free_before = round(torch.cuda.mem_get_info(dev)[0] / 2**30, 1) if dev.type == "cuda" else None
    base = FlowGRPOBaseline(folder, w, dev, getattr(torch, dtype))
    base.attach_lora()
    clock, measured = Clock(dev), []
    for i in range(warmup + steps):
        clock.times = {}
        base.step(i, clock)
        if i >= warmup:
            measured.append(dict(clock.times, step=sum(clock.times.values())))
    stage = median_times(measured)
    images = len(PROMPTS) * w.n
    stage["update_incl_ref"] = stage.pop("update")  # the reference forward is interleaved with the update
    out = {"images_per_s": images / stage["step"], "step_s": stage.pop("step"), "stage_s": stage,
           "peak_gib": dict(clock.peaks), "device_free_gib_before": free_before}  # fmt: skip
    del base
    free_memory(dev)
    return out


# ---- report ------------------------------------------------------------------------------------------------


def print_report(results: dict[str, Any]) -> None:
    head = f"workload {results['preset']} on {results['machine']} ({results['dtype']})"
    shape = f"{results['images_per_step']} images/step, {results['warmup']} warm-up + {results['steps']} measured"
    print(f"\n{head}, {shape}")
    for name, r in results["variants"].items():
        if "images_per_s" not in r:
            print(f"{name:<16} ERROR rc={r.get('rc')} {r.get('error', '')}")
            continue
        ratio = f"  x{r['vs_baseline']:.2f} baseline" if "vs_baseline" in r else ""
        ratio += f"  x{r['vs_1gpu']:.2f} one device" if "vs_1gpu" in r else ""
        print(f"{name:<16} {r['images_per_s']:6.2f} img/s  step {r['step_s']:.2f} s  "
              f"({r['images_per_step']:g} images){ratio}")  # fmt: skip
        print("   " + ", ".join(f"{k} {v:.3f}s ({100 * r['stage_share'][k]:.1f}%)" for k, v in r["stage_s"].items()))
        print("   sub: " + ", ".join(f"{k} {v:.4f}s" for k, v in r["sub_stage_s"].items()))
        if r.get("mfu"):
            print("   MFU: " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in r["mfu"].items()))
        if r["peak_gib"]:
            print(f"   peak GiB per stage: {r['peak_gib']}")
        if r["leftover_processes"]:
            print(f"   LEFTOVER processes after the run (terminated): {r['leftover_processes']}")
    b = results.get("baseline")
    if b and "images_per_s" in b:
        stages = ", ".join(f"{k} {v:.3f}s" for k, v in b["stage_s"].items())
        print(f"{'baseline':<16} {b['images_per_s']:6.2f} img/s  step {b['step_s']:.2f} s  ({stages})")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), default=None, help="a on cuda, tiny on cpu (tiny-qwen: b's shape)"
    )
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None, help="cuda when available")
    parser.add_argument("--variants", default="default", help=f"comma list of {'|'.join(VARIANTS)} joined by +")
    parser.add_argument("--steps", type=int, default=None, help="measured steps (3 on cuda, 2 on cpu)")
    parser.add_argument("--warmup", type=int, default=None, help="unmeasured first steps (2 on cuda, 1 on cpu)")
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--folder", default=None, help="pipeline folder (built here when absent)")
    parser.add_argument(
        "--reward-model",
        choices=sorted(REWARD_MODELS),
        default=None,
        help="score with the OCR reward on a random VLM reward model (trainer_run_reward.py)",
    )
    parser.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    args = parser.parse_args(argv)
    from tqdm.auto import tqdm

    if os.environ.pop("RAY_ADDRESS", None):  # every variant gets a private local Ray, never a shared cluster
        print("bench_trainer_run: RAY_ADDRESS ignored: each variant starts its own local Ray")

    device = args.device or ("cuda" if _has_cuda() else "cpu")
    preset = args.preset or ("a" if device == "cuda" else "tiny")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if not all(part in VARIANTS or GPU_PART.match(part) for part in v.split("+")):
            raise SystemExit(f"--variants: unknown variant {v!r}; parts: {', '.join(VARIANTS)}, Ngpu (join with +)")
    w = PRESETS[preset]
    dtype = "bfloat16" if device == "cuda" else "float32"
    warmup = args.warmup if args.warmup is not None else (2 if device == "cuda" else 1)
    steps = args.steps if args.steps is not None else (3 if device == "cuda" else 2)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"bench_trainer_run_{device}_{preset}"
    results: dict[str, Any] = {"preset": preset, "workload": w.__dict__, "device": device, "dtype": dtype,
                               "images_per_step": len(PROMPTS) * w.n, "warmup": warmup, "steps": steps,
                               "variants": {}}  # fmt: skip
    json_path = out / f"{stem}.json"

    def save() -> None:
        json_path.write_text(json.dumps(results, indent=1, default=str))

    with contextlib.ExitStack() as stack:
        work = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_trainer_run_")))
        folder = pathlib.Path(args.folder) if args.folder else work / "pipeline"
        if not (folder / "model_index.json").is_file():
            import torch

            t0 = time.perf_counter()
            build_pipeline_folder(w, folder, getattr(torch, dtype))
            results["build_s"] = round(time.perf_counter() - t0, 1)
        most = max([1] + [int(m.group(1)) for v in variants for p in v.split("+") if (m := GPU_PART.match(p))])
        prompts = write_prompts(w, work / "prompts.jsonl", copies=most)
        base = workload_overrides(w, folder, prompts, device, dtype)
        if args.reward_model:
            t0 = time.perf_counter()
            base += reward_model_overrides(build_reward_model(args.reward_model, work / "reward_model"), device, dtype)
            write_ocr_prompts(prompts)
            results["reward_model"] = {"name": args.reward_model, "build_s": round(time.perf_counter() - t0, 1)}
        results["overrides"] = base
        for name in tqdm(variants, desc=f"trainer variants ({preset})", unit="run"):
            folder_name = f"{preset}_{name.replace('+', '_')}"  # `+` is not a portable file-name character
            done = run_variant(name, base, out / "runs" / folder_name, warmup + steps)
            entry = {k: v for k, v in done.items() if k != "rows"}
            entry.update(summarize(done["rows"], warmup) if done["rc"] == 0 else {"error": "the trainer failed"})
            results["variants"][name] = entry
            save()
        for name, entry in results["variants"].items():  # weak scaling: against the same variant on one device
            one = results["variants"].get(single_gpu_name(name) or "")
            if one and "images_per_s" in one and "images_per_s" in entry:
                entry["vs_1gpu"] = entry["images_per_s"] / one["images_per_s"]
        if not args.skip_baseline and w.model == "sd3":
            try:
                results["baseline"] = run_baseline(folder, w, device, dtype, warmup, steps)
            except Exception as e:  # keep the trainer's figures
                results["baseline"] = {"error": f"{type(e).__name__}: {e}"}
            for entry in results["variants"].values():
                if "images_per_s" in entry and "images_per_s" in results["baseline"]:
                    entry["vs_baseline"] = entry["images_per_s"] / results["baseline"]["images_per_s"]
    results["machine"] = _machine(device)
    from trainer_run_chart import stage_chart

    results["chart"] = str(stage_chart(results, out / f"{stem}.png"))
    save()
    print_report(results)
    print(f"wrote {json_path} and {results['chart']}")
    failed = [n for n, r in results["variants"].items() if "images_per_s" not in r]
    if failed:
        raise SystemExit(f"variants failed: {', '.join(failed)} (see the log above and {json_path})")
    return results


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _machine(device: str) -> str:
    import torch
    from trainer_workload_parts import machine_name

    return machine_name(torch.device("cuda", 0) if device == "cuda" else torch.device("cpu"))


if __name__ == "__main__":
    main()
