"""The migration guide's rule table is generated from the rule data and committed up to date."""

import importlib.util
import os

from verl_migrate.rules import all_rules
from verl_migrate.rules._coverage import ROW_COUNT, UNCHANGED_ROWS

TARGET = "project"  # the rule table in the docs describes this project's target
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "scripts", "gen_rule_table.py")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_rule_table", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_rule_table_is_up_to_date() -> None:
    gen = _generator()
    with open(gen.PAGE, encoding="utf-8") as fh:
        page = fh.read()
    assert gen.render(page) == page, "run python tools/migrate-config/scripts/gen_rule_table.py"
    assert all(f"`{r.id}`" in page for r in all_rules())


def test_every_row_of_the_41_rules_is_covered() -> None:
    covered = {row for r in all_rules() for row in r.refs}
    assert set(range(1, ROW_COUNT + 1)) == covered | set(UNCHANGED_ROWS)
    assert not covered & set(UNCHANGED_ROWS)
    assert all(1 <= row <= ROW_COUNT for row in covered)


def test_pre_commit_hook_definition() -> None:
    from ruamel.yaml import YAML

    root = os.path.join(os.path.dirname(__file__), "..", "..", "..")
    with open(os.path.join(root, ".pre-commit-hooks.yaml"), encoding="utf-8") as fh:
        (hook,) = YAML(typ="safe").load(fh)
    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), encoding="utf-8") as fh:
        pyproject = fh.read()
    assert hook["id"] == "verl-migrate-config"
    assert hook["entry"].split()[0] + ' = "verl_migrate.cli:main"' in pyproject
    assert "--check" in hook["entry"] and hook["language"] == "python"
