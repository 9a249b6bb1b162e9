"""Smoke tests of the verl-compat distribution itself."""

from importlib.metadata import requires
from pathlib import Path

import verl_compat


def test_package_ships_py_typed_and_version():
    assert (Path(verl_compat.__file__).parent / "py.typed").is_file()
    assert verl_compat.__version__.count(".") >= 2


def test_package_depends_on_omni_and_migrate_config():
    names = {r.split(">")[0].split("<")[0].strip() for r in requires("verl-compat") or []}
    assert {"verl-omni", "verl-migrate-config"} <= names
