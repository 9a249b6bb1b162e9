"""Benchmark verl-migrate-config start-up and the full 571-key migration (wall clock, subprocesses).

Every command runs N times as a fresh process; the median is reported next to the median of `python -c pass`
measured in the same run, so the numbers are comparable across machines. Targets (issue 6): migrating the full
old config < 0.3 s wall including interpreter start-up; `verl-migrate-config --help` < 0.2 s.

Usage: python benchmarks/bench_migrate_config.py [--runs 21] [--png /tmp/bench_migrate_config.png]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = os.path.join(ROOT, "tools", "migrate-config", "tests", "golden")
TARGETS = {"migrate full 571-key config": 0.3, "--help": 0.2}


def machine() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} logical CPUs)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} logical CPUs)"


def command() -> list[str]:
    exe = os.path.join(os.path.dirname(sys.executable), "verl-migrate-config")
    if os.path.exists(exe):
        return [exe]
    found = shutil.which("verl-migrate-config")
    return [found] if found else [sys.executable, "-m", "verl_migrate"]


def median_wall(argv: list[str], runs: int) -> tuple[float, float]:
    """Return the median wall time and the median CPU time (user + system) of `argv` run as a fresh process."""
    import resource

    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        res = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, timeout=60)
        walls.append(time.perf_counter() - t)
        if res.returncode not in (0, 1):  # 1 is `--check` finding work; anything else would time a failure
            raise SystemExit(f"{' '.join(argv)} exited {res.returncode}: {res.stderr.decode(errors='replace')[-500:]}")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def in_process(runs: int) -> float:
    from verl_migrate import migrate_yaml_text

    with open(os.path.join(GOLDEN, "old_full_dump.yaml"), encoding="utf-8") as fh:
        text = fh.read()
    migrate_yaml_text(text)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        migrate_yaml_text(text)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=21)
    p.add_argument("--png", default=os.path.join("/tmp", "bench_migrate_config.png"))
    args = p.parse_args()
    cmd = command()
    cases = {
        "python -c pass (baseline)": [sys.executable, "-c", "pass"],
        "--help": [*cmd, "--help"],
        "migrate full 571-key config": [*cmd, os.path.join(GOLDEN, "old_full_dump.yaml")],
        "--check full config + 2 scripts": [
            *cmd,
            "--check",
            *(
                os.path.join(GOLDEN, f)
                for f in ("old_full_dump.yaml", "run_qwen_image_ocr_lora.sh", "run_flowgrpo_trainer_diffusers.sh")
            ),
        ],
    }
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"machine: {machine()}; python {platform.python_version()}; load average {load:.1f}; "
        f"runs per case: {args.runs} (median)"
    )
    measured = {name: median_wall(argv, args.runs) for name, argv in cases.items()}
    results = {name: wall for name, (wall, _) in measured.items()}
    base = results["python -c pass (baseline)"]
    print(f"{'case':<34} {'wall s':>8} {'x baseline':>11} {'cpu s':>7} {'target s':>9}  ok")
    for name, (secs, cpu) in measured.items():
        target = TARGETS.get(name)
        ok = "" if target is None else ("yes" if secs < target else "NO")
        print(f"{name:<34} {secs:8.3f} {secs / base:11.1f} {cpu:7.3f} {target if target else '':>9}  {ok}")
    inproc = in_process(args.runs)
    print(f"{'in-process migrate_yaml_text':<34} {inproc:8.3f} {inproc / base:11.1f}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = [*results, "in-process migrate_yaml_text"]
        values = [*results.values(), inproc]
        fig, ax = plt.subplots(figsize=(8, 3.2))
        ax.barh(names, values, color=["#999", "#4a7", "#47a", "#47a", "#a74"])
        for name, target in TARGETS.items():
            ax.plot([target, target], [names.index(name) - 0.4, names.index(name) + 0.4], "r--")
        ax.set_xlabel("median wall time (s); red dashes: targets")
        ax.set_title(f"verl-migrate-config on {machine()}", fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"chart: {args.png}")
    except ImportError:
        print("matplotlib not installed: no chart")
    return 0


if __name__ == "__main__":
    sys.exit(main())
