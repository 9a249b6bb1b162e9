"""`benchmarks/regression_gate.py`'s comparison with the baseline (the logic only: nothing here is timed)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _gate():
    spec = importlib.util.spec_from_file_location("regression_gate", ROOT / "benchmarks" / "regression_gate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    return module


def test_compare_fails_only_the_cases_more_than_the_threshold_slower():
    gate = _gate()
    baseline = {"gen": 2.0, "ref": 1.0, "update": 4.0}
    current = {"gen": 2.6, "ref": 1.31, "update": 1.0, "new_case": 99.0}  # +30 %, +31 %, faster, no baseline
    failures = gate.compare(current, baseline, threshold=0.30)
    assert failures == ["ref: median ratio 1.310 vs baseline 1.000 (+31% > +30%)"]


def test_compare_a_baseline_case_not_measured_fails_and_a_2x_slowdown_fails_every_case():
    gate = _gate()
    baseline = {"gen": 2.0, "export": 0.5}
    missing = gate.compare({"gen": 2.0}, baseline)
    assert len(missing) == 1 and missing[0].startswith("export: in baseline_cpu.json but not measured")
    doubled = gate.compare({k: 2 * v for k, v in baseline.items()}, baseline)
    assert [line.split(":")[0] for line in doubled] == ["export", "gen"]
    assert gate.compare(dict(baseline), baseline) == []


def test_the_committed_baseline_names_the_gate_cases():
    import json

    data = json.loads((ROOT / "benchmarks" / "baseline_cpu.json").read_text())
    assert set(data["median_ratio"]) == {"gen", "ref", "update", "export"}
    assert all(v > 0 for v in data["median_ratio"].values())
