"""No runtime module downloads or inspects wheels (issue 34): that is CI tooling, in `tools/vllm-omni-contract/`.

Every module of the four dists' `src/` trees is parsed (`ast`; nothing is imported) and every import counts: at
module level, inside a function, under `TYPE_CHECKING`. A runtime module may not import the standard library's
wheel readers and downloaders (`zipfile`, `urllib.request`), `pip` or `wheel`, nor a module named like the
contract tooling (`contract_check`, `wheel_sources`); no file of that name may ship either.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parents[2]
SRC_TREES = ["packages/verl-core/src", "packages/verl-omni/src", "tools/migrate-config/src", "shims/compat/src"]
FORBIDDEN_MODULES = ("zipfile", "urllib.request", "pip", "wheel")
TOOLING_NAMES = ("contract_check", "wheel_sources")


def _modules() -> list[pathlib.Path]:
    return sorted(p for tree in SRC_TREES for p in (ROOT / tree).rglob("*.py"))


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """`(line, dotted name)` of every import; `from a import b` yields both `a` and `a.b`."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            out.append((node.lineno, base))
            out += [(node.lineno, f"{base}.{alias.name}".lstrip(".")) for alias in node.names]
    return out


def wheel_tooling_imports(path: pathlib.Path) -> list[str]:
    """What `path` imports that belongs to wheel download / inspection tooling, as `file:line name`."""
    problems = []
    for line, name in _imported(ast.parse(path.read_text(), str(path))):
        parts = name.lstrip(".").split(".")
        banned = any(name.lstrip(".") == m or name.lstrip(".").startswith(m + ".") for m in FORBIDDEN_MODULES)
        if banned or any(part in TOOLING_NAMES for part in parts):
            problems.append(f"{path.relative_to(ROOT)}:{line} imports `{name}`")
    return problems


def test_the_scan_sees_every_dist():
    modules = _modules()
    for tree in SRC_TREES:
        assert any(ROOT / tree in m.parents for m in modules), f"no module found under {tree}"


def test_no_runtime_module_imports_wheel_tooling():
    problems = [p for m in _modules() for p in wheel_tooling_imports(m)]
    assert not problems, "runtime modules import wheel tooling (move it to tools/vllm-omni-contract/):\n" + "\n".join(
        problems
    )


def test_no_runtime_module_is_named_like_the_contract_tooling():
    shipped = [str(m.relative_to(ROOT)) for m in _modules() if m.stem in TOOLING_NAMES]
    assert not shipped, f"CI tooling inside a dist: {shipped}; it lives in tools/vllm-omni-contract/"


@pytest.mark.parametrize(
    ("source", "want"),
    [
        pytest.param("import zipfile\n", "m.py:1 imports `zipfile`", id="zipfile"),
        pytest.param(
            "def f():\n    from urllib.request import urlopen\n",
            "m.py:2 imports `urllib.request`",
            id="urllib.request in a function",
        ),
        pytest.param(
            "from verl_omni.rollout.vllm_omni import wheel_sources\n",
            "m.py:1 imports `verl_omni.rollout.vllm_omni.wheel_sources`",
            id="wheel_sources",
        ),
        pytest.param("from .contract_check import main\n", "m.py:1 imports `.contract_check`", id="relative"),
    ],
)
def test_wheel_tooling_imports_are_reported(tmp_path, monkeypatch, source, want):
    module = tmp_path / "m.py"
    module.write_text(source)
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert wheel_tooling_imports(module)[0] == want


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("import urllib.parse\n", id="urllib.parse"),
        pytest.param("from verl_omni.rollout.vllm_omni.pipelines import pipeline_qualname\n", id="pipelines"),
        pytest.param("from verl_omni.rollout.vllm_omni import contract\n", id="contract data"),
    ],
)
def test_other_imports_pass(tmp_path, monkeypatch, source):
    module = tmp_path / "m.py"
    module.write_text(source)
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert wheel_tooling_imports(module) == []
