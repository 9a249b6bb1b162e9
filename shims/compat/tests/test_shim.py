"""The import shim: old modules serve the new objects, warn once per site, decline everything else."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from verl_compat._finder import _upstream_verl

LEGACY = Path(__file__).parent / "legacy"
_WARNING = re.compile(r"^(?P<file>.+?):(?P<line>\d+): VerlDeprecationWarning: (?P<text>.*)$", re.M)


def run_python(*args: str, env: dict[str, str] | None = None, cwd: str | None = None, timeout: float = 120):
    """Run `python *args` with a clean warnings environment; return the CompletedProcess (text)."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "VERL_COMPAT_SILENT")}
    base.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env={**base, **(env or {})}, cwd=cwd, timeout=timeout
    )


UPSTREAM = _upstream_verl()
no_verl = pytest.mark.skipif(UPSTREAM, reason="the world without upstream verl (nox -s tests)")
with_verl = pytest.mark.skipif(not UPSTREAM, reason="needs upstream verl installed (nox -s legacy_verl)")


def warning_sites(stderr: str) -> Counter:
    """(file name, line, text) of every VerlDeprecationWarning printed, counted."""
    return Counter((Path(m["file"]).name, int(m["line"]), m["text"]) for m in _WARNING.finditer(stderr))


def test_every_old_module_serves_the_new_objects() -> None:
    # `always` for DeprecationWarning (as the nox test session sets it): still one warning per site
    proc = run_python("-W", "always::DeprecationWarning", str(LEGACY / "every_module.py"))
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-3000:]
    sites = warning_sites(proc.stderr)
    assert sites and max(sites.values()) == 1, sites
    texts = " ".join(t for _, _, t in sites)
    assert "use `from verl_omni.config import DiffusionModelConfig`" in texts
    assert "from verl.trainer.diffusion.diffusion_algos import compute_flow_grpo_outcome_advantage" in texts


def test_star_import_and_trimmed_module_warn_once_per_site() -> None:
    proc = run_python(str(LEGACY / "star_and_sites.py"))
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-3000:]
    sites = warning_sites(proc.stderr)
    lines = (LEGACY / "star_and_sites.py").read_text().splitlines()
    star_line = 1 + next(i for i, s in enumerate(lines) if s.startswith("from") and "import *" in s)
    loop_line = 1 + next(i for i, s in enumerate(lines) if "workers_config.DiffusionModelConfig" in s)
    assert sorted(line for _, line, _ in sites) == [star_line, loop_line], sites  # the star import once, the loop once
    assert all(n == 1 for n in sites.values())
    star = [t for _, line, t in sites if line == star_line]
    assert star[0].startswith("`from verl.trainer.diffusion.diffusion_algos import *` is deprecated")


@no_verl
def test_old_registry_names_resolve() -> None:
    proc = run_python(str(LEGACY / "registries.py"))
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-3000:]


def test_silenced_by_env() -> None:
    code = "from verl.workers.config import DiffusionModelConfig"
    assert "VerlDeprecationWarning" in run_python("-c", code).stderr
    assert "VerlDeprecationWarning" not in run_python("-c", code, env={"VERL_COMPAT_SILENT": "1"}).stderr


def test_warning_option_turns_old_names_into_errors() -> None:
    proc = run_python(
        "-W",
        "error::verl_compat.VerlDeprecationWarning",
        "-c",
        "import verl.workers.config as c; c.DiffusionModelConfig",
    )
    assert proc.returncode == 1
    assert "verl_compat.VerlDeprecationWarning: `from verl.workers.config import DiffusionModelConfig`" in proc.stderr
    # Python's own line (it reads -W before site-packages is importable) appears once; verl-compat adds none
    assert proc.stderr.count("Invalid -W option ignored: invalid module name: 'verl_compat'") <= 1, proc.stderr
    assert "verl-compat: -W option" not in proc.stderr


def test_warning_option_with_a_wrong_category_is_reported_by_the_shim() -> None:
    option = "error::verl_compat.VerlDeprecationWarnings"
    proc = run_python("-W", option, "-c", "from verl.workers.config import DiffusionModelConfig")
    assert proc.returncode == 0, proc.stderr
    assert f"verl-compat: -W option {option!r} ignored: unknown warning category" in proc.stderr, proc.stderr


def test_start_up_imports_nothing_heavy() -> None:
    code = (
        "import sys; from verl_compat._finder import _FINDER; assert sys.meta_path[0] is _FINDER;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('torch', 'verl_omni', 'verl_migrate', 'verl', 'examples', 'typing', 'importlib.abc')))"
    )
    proc = run_python("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@no_verl
def test_other_verl_paths_say_verl_is_not_installed() -> None:
    proc = run_python("-c", "import verl.utils.torch_functional")
    assert proc.returncode == 1
    assert "No module named 'verl.utils.torch_functional': upstream verl is not installed" in proc.stderr
    assert "pip install verl" in proc.stderr
    proc = run_python("-c", "import verl.workers.config as c; c.FSDPEngineConfig")
    assert "has no attribute 'FSDPEngineConfig' (upstream verl is not installed" in proc.stderr


def test_not_provided_names_say_why_and_what_replaces_them() -> None:
    proc = run_python("-c", "from verl.trainer.diffusion.ray_diffusion_trainer import RayFlowGRPOTrainer")
    assert proc.returncode == 1
    assert "is not provided by verl-compat, because verl-omni's trainer is built from one config" in proc.stderr
    assert "from verl_omni.trainer.flow_grpo_trainer import FlowGRPOTrainer" in proc.stderr


@no_verl  # with upstream verl installed, names it still defines (e.g. trimmed fsdp_utils helpers) are its own
def test_every_not_provided_name_raises_its_reason() -> None:
    # all of them, through `from <old> import <name>`: facades, patched modules and the served
    # `verl.trainer.main_flowgrpo` (a real file, whose `TaskRunner` / `run_flowgrpo` once gave a bare ImportError)
    proc = run_python(str(LEGACY / "not_provided.py"))
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stdout + proc.stderr[-3000:]


def test_old_trainer_module_names_without_counterpart_say_why() -> None:
    # `verl.trainer.main_flowgrpo` is gone from upstream too, so the shim serves it in both worlds
    proc = run_python("-c", "from verl.trainer.main_flowgrpo import TaskRunner")
    assert "NotProvidedError: `from verl.trainer.main_flowgrpo import TaskRunner` is not provided" in proc.stderr


def test_real_examples_package_wins(tmp_path: Path) -> None:
    pkg = tmp_path / "examples" / "flowgrpo_trainer"
    pkg.mkdir(parents=True)
    (pkg / "scheduler.py").write_text("FlowMatchSDEDiscreteScheduler = 'the user file'\n")
    code = "from examples.flowgrpo_trainer.scheduler import FlowMatchSDEDiscreteScheduler as S; print(S)"
    proc = run_python("-c", code, cwd=str(tmp_path))
    assert proc.stdout.strip() == "the user file", proc.stderr
    proc = run_python("-c", code)
    assert "FlowMatchSDEDiscreteScheduler'>" in proc.stdout, proc.stderr


def test_finder_declines_unrelated_names() -> None:
    from verl_compat._finder import _FINDER

    assert _FINDER.find_spec("json") is None
    assert _FINDER.find_spec("verlx") is None
    assert _FINDER.find_spec("examplesx.y") is None


def test_pth_file_is_installed() -> None:
    import site

    found = [Path(d) / "verl_compat.pth" for d in site.getsitepackages() if (Path(d) / "verl_compat.pth").is_file()]
    assert found, "verl_compat.pth is not in site-packages"
    line = found[0].read_text().strip()
    assert line.startswith("import ") and "VERL_COMPAT_DISABLE" in line and "verl_compat._startup" in line
    assert sys.modules.get("verl_compat._startup") is not None


@with_verl
def test_upstream_world_serves_only_removed_paths() -> None:
    proc = run_python(str(LEGACY / "upstream_world.py"))
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", proc.stderr[-3000:]


def test_from_package_import_is_one_site_even_with_always() -> None:
    # `from pkg import X` probes `hasattr(pkg, X)` inside importlib before the import itself reads X
    code = (
        "from verl.workers.config import DiffusionModelConfig\n"
        "from verl.models.diffusers_model import DiffusionModelBase\n"
    )
    proc = run_python("-W", "always::DeprecationWarning", "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("VerlDeprecationWarning") == 2, proc.stderr


@pytest.mark.skipif(importlib.util.find_spec("vllm_omni") is not None, reason="vllm-omni is installed")
def test_vllm_omni_names_say_what_to_install() -> None:
    code = "from examples.flowgrpo_trainer.vllm_omni.pipeline_qwenimage import QwenImagePipelineWithLogProb"
    proc = run_python("-c", code)
    assert proc.returncode == 1
    assert 'needs vllm-omni, which is not installed: pip install "verl-omni[vllm-omni]"' in proc.stderr


def test_importing_an_old_module_imports_nothing_heavy_until_a_name_is_used() -> None:
    # with upstream verl installed, its own `verl.workers.config` imports torch: only our heavy imports count there
    heavy = ("verl_omni", "libcst") if UPSTREAM else ("torch", "verl_omni", "libcst")
    code = (
        "import sys, verl.trainer.diffusion.diffusion_algos as m, verl.workers.config;"
        f"print(sorted(x for x in {heavy!r} if x in sys.modules));"
        "m.kl_penalty_image; print('torch' in sys.modules and 'verl_omni.algos' in sys.modules)"
    )
    proc = run_python("-c", code)
    assert proc.stdout.split("\n")[:2] == ["[]", "True"], proc.stderr
