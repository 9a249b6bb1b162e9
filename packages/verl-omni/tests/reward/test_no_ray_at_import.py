"""Importing the reward and data packages (and building a thread-pool manager) does not import Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # a fresh interpreter imports torch

CODE = """
import sys
import verl_omni.data, verl_omni.reward
from verl_omni.reward import RewardConfig, VisualRewardManager
VisualRewardManager(RewardConfig(pool="thread", num_workers=1)).close()
print("ray" in sys.modules)
"""


def test_scoring_code_does_not_import_ray():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip() == "False"
