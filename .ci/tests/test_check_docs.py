"""Tests of `.ci/check_docs.py`: real names pass, names that do not exist are reported with file and line."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

_SPEC = importlib.util.spec_from_file_location("check_docs", pathlib.Path(__file__).parents[1] / "check_docs.py")
check_docs = importlib.util.module_from_spec(_SPEC)
sys.modules["check_docs"] = check_docs  # dataclasses look their module up by name
_SPEC.loader.exec_module(check_docs)


@pytest.fixture(scope="module")
def index():
    return check_docs.build_index()


def _problems(index, tmp_path, text: str) -> list[str]:
    """Problems of a page `page.md` holding `text` (paths are reported relative to the check's ROOT)."""
    page = tmp_path / "page.md"
    page.write_text(text)
    root = check_docs.ROOT
    try:
        check_docs.ROOT = tmp_path
        return check_docs.check_file(index, page)
    finally:
        check_docs.ROOT = root


@pytest.mark.parametrize(
    "span",
    [
        "verl_core.rollout.replica.RolloutReplica",
        "verl_core.rollout.RolloutHttpServer",
        "verl_omni.schedulers.FlowMatchSDEDiscreteScheduler",
        "verl_core.config.BaseConfig.evolve",
        "python -m verl_migrate --help",
        "verl-migrate-config old.yaml",
        "verl-core[vllm]",
        "omega_conf_to_dataclass()",
        "RolloutHttpServer",
        "KeyError",
        "FlowMatchEulerDiscreteScheduler",
        "python -m pytest -q",
    ],
)
def test_check_docs_accepts_existing_names(index, tmp_path, span):
    assert _problems(index, tmp_path, f"text `{span}` text\n") == []


@pytest.mark.parametrize(
    ("span", "needle"),
    [
        ("verl_core.rollout.NoSuchServer", "defines no 'NoSuchServer'"),
        ("verl_omni.no_such_module.Thing", "defines no 'no_such_module'"),
        ("verl_core.config.BaseConfig.no_such_method", "has no member 'no_such_method'"),
        ("python -m verl_omni.no_such_main", "no such module"),
        ("python -m verl_core", "has no __main__.py"),
        ("verl-no-such-command --flag", "no dist declares this console script"),
        ("NoSuchHttpServer", "defined nowhere"),
        ("no_such_function()", "defined nowhere"),
        ("python -m some_random_tool", "not a project module nor a listed tool"),
    ],
)
def test_check_docs_reports_names_that_do_not_exist(index, tmp_path, span, needle):
    problems = _problems(index, tmp_path, f"intro\ntext `{span}` text\n")
    assert len(problems) == 1, problems
    assert problems[0].startswith("page.md:2: ") and needle in problems[0]


def test_check_docs_reads_fenced_blocks_and_skips_comments(index, tmp_path):
    problems = _problems(index, tmp_path, "```bash\n# verl-not-a-command in a comment\nverl-not-a-command run\n```\n")
    assert problems == ["page.md:3: verl-not-a-command: no dist declares this console script"]
