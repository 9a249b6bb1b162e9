"""The launch examples under examples/: every config composes into a valid trainer config, every script is
executable bash that launches `verl-omni-train` (nothing is trained here)."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

from verl_omni.trainer.config import load_config

EXAMPLES = pathlib.Path(__file__).resolve().parents[4] / "examples"
CONFIGS = sorted(EXAMPLES.glob("*/*.yaml"))
SCRIPTS = sorted(EXAMPLES.glob("*/*.sh"))


def test_the_examples_folder_has_configs_and_scripts():
    assert CONFIGS and SCRIPTS, EXAMPLES


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_config_builds(path):
    config = load_config(config_name=path.stem, config_dir=str(path.parent))
    if path.parent.name == "grpo_guard":  # upstream's GRPO-Guard recipe values
        actor = config.actor_rollout_ref.actor
        assert actor.diffusion_loss.loss_mode == "grpo_guard" and actor.diffusion_loss.clip_ratio == 2e-6
        assert config.actor_rollout_ref.rollout.algo.sde_type == "sde"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_script_is_executable_bash_that_runs_the_trainer(path):
    assert os.access(path, os.X_OK), f"{path}: chmod +x"
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)
    text = path.read_text()
    assert "exec verl-omni-train" in text and '"$@"' in text
    for name in (p.stem for p in CONFIGS if p.parent == path.parent):
        if f"--config-name {name}" in text:
            assert "--config-path" in text
