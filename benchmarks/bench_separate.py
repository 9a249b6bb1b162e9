"""Overheads of `trainer.mode: separate` against colocated on the tiny quickstart stack (CPU by default).

Each variant is one `verl-omni-train` run in this process (its own private local Ray): the quickstart (tiny random
Qwen-Image, 4 prompts x 8 images, LoRA, fp32) for `--warmup + --steps` steps; the figures are medians over the
measured steps of the run folder's `metrics.jsonl`. Variants:

    colocated        the default loop (the rollout sleeps while the actor trains)
    colocated-awake  the same with free_cache_engine=false (no sleep/wake: the fair baseline of the queue's cost)
    separate-lag0    trainer.mode=separate, max_off_policy_threshold=0: the same schedule through the queue (its cost)
    separate-lag1    threshold 1: the rollout generates the next batch while the actor trains

On one device (or the 2-core CPU) the separate mode cannot run rollout and training on different devices, so what
this measures is the queue, the version gate and the extra Ray actors, plus whatever overlap the cores allow. With
`--device cuda` the separate variants put the rollout servers on the actor's GPU (`trainer.separate.share_devices=
true`, as colocated mode places them): a rollout pool of its own would need a second GPU, and placement would fail
naming the rollout pool. `--share-devices on|off` overrides that choice.

    python benchmarks/bench_separate.py --steps 4 --warmup 1
    python benchmarks/bench_separate.py --device cuda   # one GPU: separate mode on the actor's device
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile

SEPARATE = [
    "trainer.mode=separate",
    "actor_rollout_ref.rollout.nnodes=1",
    "actor_rollout_ref.rollout.n_gpus_per_node=1",
    "actor_rollout_ref.rollout.free_cache_engine=false",
]
SHARED = [  # one device: the rollout servers on the actor's bundles
    "trainer.mode=separate",
    "actor_rollout_ref.rollout.nnodes=0",
    "trainer.separate.share_devices=true",
    "actor_rollout_ref.rollout.free_cache_engine=false",
]
VARIANTS = {
    "colocated": [],
    "colocated-awake": ["actor_rollout_ref.rollout.free_cache_engine=false"],
    "separate-lag0": [*SEPARATE, "trainer.separate.max_off_policy_threshold=0"],
    "separate-lag1": [*SEPARATE, "trainer.separate.max_off_policy_threshold=1"],
}


def variant_overrides(name: str, share_devices: bool) -> list[str]:
    """The variant's overrides; with `share_devices` a separate variant's rollout sits on the actor's devices."""
    overrides = VARIANTS[name]
    if share_devices and overrides[: len(SEPARATE)] == SEPARATE:
        return [*SHARED, *overrides[len(SEPARATE) :]]
    return list(overrides)


def run_variant(
    name: str, folder: pathlib.Path, warmup: int, steps: int, device: str, *, share_devices: bool = False
) -> dict[str, float]:
    """One run; the medians of its measured steps."""
    from verl_omni.trainer.main import run

    argv = [
        "--config-name",
        "quickstart",
        f"trainer.run_dir={folder / 'run'}",
        f"trainer.default_local_dir={folder / 'ckpt'}",
        f"trainer.total_training_steps={warmup + steps}",
        f"trainer.device={device}",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        *variant_overrides(name, share_devices),
    ]
    if run(argv) != 0:
        raise RuntimeError(f"{name}: verl-omni-train failed (see above)")
    rows = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()][warmup:]
    return {
        "step_s": statistics.median(r["timing_s/step"] for r in rows),
        "queue_wait_s": statistics.median(r.get("timing_s/queue_wait", 0.0) for r in rows),
        "rollout_idle": statistics.median(r.get("async/rollout_idle_frac", float("nan")) for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="measured steps per variant")
    parser.add_argument("--warmup", type=int, default=1, help="first steps left out of the medians")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    parser.add_argument(
        "--share-devices",
        default="auto",
        choices=["auto", "on", "off"],
        help="separate variants: rollout servers on the actor's devices (auto: on for --device cuda)",
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    args = parser.parse_args()
    share = args.share_devices == "on" or (args.share_devices == "auto" and args.device == "cuda")
    results = {}
    for name in args.variants.split(","):
        with tempfile.TemporaryDirectory(prefix=f"bench_separate_{name}_") as tmp:
            stats = run_variant(name, pathlib.Path(tmp), args.warmup, args.steps, args.device, share_devices=share)
        results[name] = stats
    base = results.get("colocated", next(iter(results.values())))["step_s"]
    print("| variant | s/step | steps/s | x colocated | queue wait s | rollout idle |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        print(
            f"| {name} | {r['step_s']:.3f} | {1 / r['step_s']:.3f} | {base / r['step_s']:.2f} | "
            f"{r['queue_wait_s']:.3f} | {r['rollout_idle']:.2f} |"
        )


if __name__ == "__main__":
    main()
