"""Test helpers for verl-migrate-config: makes the `verl_migrate_cases` case tables importable."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
