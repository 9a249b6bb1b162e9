"""No test in the repository skips unconditionally, and none skips when one of the project's own modules is absent.

A skip must name what is missing (a GPU, vllm, an optional extra) and happen only when it is missing; the
project's own modules are always installed, so an `importorskip` of one hides a test that can never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
OWN = ("verl_core", "verl_omni", "verl_compat", "verl_migrate")


def _test_files() -> list[Path]:
    folders = ("packages/*/tests", "shims/*/tests", "tools/*/tests")
    return sorted(p for folder in folders for p in ROOT.glob(f"{folder}/**/*.py"))


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def unconditional_skips(source: str) -> list[tuple[int, str]]:
    """`(line, what)` for each skip in `source` that runs whatever the machine has."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _dotted(node) == "pytest.mark.skip":  # bare or called
            found.append((node.lineno, "pytest.mark.skip"))
        if (
            isinstance(node, ast.Call)
            and _dotted(node.func) == "pytest.mark.skipif"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value
        ):
            found.append((node.lineno, "pytest.mark.skipif(<constant true>)"))
        if isinstance(node, ast.Call) and _dotted(node.func) == "pytest.importorskip" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and str(arg.value).split(".")[0] in OWN:
                found.append((node.lineno, f"pytest.importorskip({arg.value!r}) of the project's own module"))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            for stmt in node.body:  # a direct statement of the test body, under no condition
                if isinstance(stmt, ast.Expr) and _dotted(stmt.value) == "pytest.skip":
                    found.append((stmt.lineno, f"pytest.skip() in the body of {node.name}"))
    return sorted(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        pytest.param("import pytest\n@pytest.mark.skip(reason='x')\ndef test_a(): pass\n", 1, id="mark-skip"),
        pytest.param("import pytest\npytestmark = pytest.mark.skip\n", 1, id="module-mark"),
        pytest.param("import pytest\n@pytest.mark.skipif(True, reason='x')\ndef test_a(): pass\n", 1, id="skipif-true"),
        pytest.param("import pytest\ndef test_a():\n    pytest.skip('later')\n", 1, id="body-skip"),
        pytest.param("import pytest\ndef test_a():\n    pytest.importorskip('verl_omni.reward.pool')\n", 1, id="own"),
        pytest.param("import pytest\nvllm = pytest.importorskip('vllm', reason='needs vllm')\n", 0, id="vllm-ok"),
        pytest.param("import pytest\n@pytest.mark.skipif(not HAS, reason='x')\ndef test_a(): pass\n", 0, id="skipif"),
        pytest.param("import pytest\ndef test_a():\n    if x:\n        pytest.skip('no x')\n", 0, id="guarded"),
    ],
)
def test_unconditional_skips_finds_each_kind(source, expected):
    assert len(unconditional_skips(source)) == expected


def test_no_test_in_the_repository_skips_unconditionally():
    found = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in _test_files()
        for line, what in unconditional_skips(path.read_text(encoding="utf-8"))
    ]
    assert not found, "tests that can never run:\n" + "\n".join(found)
