"""verl-compat start-up cost: `python -c pass` with the `verl_compat.pth` hook on and off, in the same venv.

The hook is switched off with `VERL_COMPAT_DISABLE=1` (the `.pth` line checks it before importing anything), so
both sides run the same interpreter, site-packages and `.pth` files. Runs are interleaved so machine drift hits
both equally. Reports medians of: wall-clock of the whole process, `-X importtime` cumulative time of `site`,
and of `verl_compat._startup` alone (bytecode caches on, after a warm-up run); growth in ms and as a ratio; and
an unrelated lookup (`find_spec("csv")`) timed in-process with and without the finder on `sys.meta_path`.
Target (issue #12): growth <= 3 ms.

    python benchmarks/bench_compat_import.py [--runs 40] [--out outputs/]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

_SITE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| site$", re.M)
_STARTUP = re.compile(r"import time:\s+\d+ \|\s+(\d+) \|\s+verl_compat\._startup$", re.M)


def _one(disable: bool) -> tuple[float, float, float]:
    # bytecode caches on, as in a normal install (PYTHONDONTWRITEBYTECODE would recompile every module each run)
    env = {k: v for k, v in os.environ.items() if k not in ("VERL_COMPAT_DISABLE", "PYTHONDONTWRITEBYTECODE")}
    if disable:
        env["VERL_COMPAT_DISABLE"] = "1"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    wall = (time.perf_counter() - t0) * 1e3
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], env=env, capture_output=True, text=True)
    site = _SITE.search(err.stderr)
    startup = _STARTUP.search(err.stderr)
    return wall, int(site.group(1)) / 1e3 if site else float("nan"), int(startup.group(1)) / 1e3 if startup else 0.0


def _unrelated_import_us(runs: int) -> dict[str, float]:
    """Median µs of `find_spec` for a fresh unrelated name, with and without the finder first on sys.meta_path."""
    import importlib.util

    from verl_compat._finder import install, uninstall

    out = {}
    for label, on in (("with_finder", True), ("without_finder", False)):
        install() if on else uninstall()
        times = []
        for _ in range(runs):
            importlib.invalidate_caches()
            t0 = time.perf_counter()
            importlib.util.find_spec("csv")  # not imported here: goes through sys.meta_path
            times.append((time.perf_counter() - t0) * 1e6)
        out[label] = statistics.median(times)
    install()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--out", default="outputs")
    args = ap.parse_args()
    on, off = [], []
    _one(False)  # warm-up: writes the bytecode caches
    for _ in range(args.runs):
        on.append(_one(False))
        off.append(_one(True))
    med = {name: [statistics.median(r[i] for r in rows) for i in range(3)] for name, rows in (("on", on), ("off", off))}
    result = {
        "machine": f"{platform.node()} {platform.processor() or platform.machine()} {os.cpu_count()} CPUs",
        "python": sys.version.split()[0],
        "runs": args.runs,
        "wall_ms": {"with": med["on"][0], "without": med["off"][0], "growth": med["on"][0] - med["off"][0],
                    "ratio": med["on"][0] / med["off"][0]},
        "importtime_site_ms": {"with": med["on"][1], "without": med["off"][1], "growth": med["on"][1] - med["off"][1],
                               "ratio": med["on"][1] / med["off"][1]},
        "importtime_verl_compat_startup_ms": med["on"][2],
        "find_spec_unrelated_us": _unrelated_import_us(args.runs * 5),
        "target_growth_ms": 3.0,
    }  # fmt: skip
    text = json.dumps(result, indent=2)
    print(text)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench_compat_import.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
