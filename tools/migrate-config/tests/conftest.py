"""Test helpers for verl-migrate-config.

Makes the `verl_migrate_cases` case tables importable, and pins the target: the tests of the rules' own behaviour
run against upstream verl-omni's frozen tree (`verl_migrate.upstream.pinned`), so they do not go stale when this
project's trainer config changes. A test module that checks migrations for this project's trainer config (the real
target) says so with `TARGET = "project"`.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# the rules are registered once, with this project's target, as in production (their summaries name it)
from verl_migrate.rules import all_rules

all_rules()


@pytest.fixture(autouse=True)
def _pinned_target(request):
    if getattr(request.module, "TARGET", "upstream") == "project":
        yield
        return
    from verl_migrate.upstream import pinned

    with pinned():
        yield
