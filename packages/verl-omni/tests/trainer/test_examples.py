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
    if path.parent.name == "diffusion_nft":  # upstream's DiffusionNFT recipe values
        loss = config.actor_rollout_ref.actor.diffusion_loss
        assert (loss.loss_mode, loss.mix_beta, loss.ref_kl_coef) == ("diffusion_nft", 0.1, 1e-4)
        assert config.algorithm.old_policy_decay_schedule == "delayed_linear_to_0_999"
    if path.parent.name == "dpo":  # upstream's online DPO recipe values
        actor = config.actor_rollout_ref.actor
        assert (actor.diffusion_loss.loss_mode, actor.diffusion_loss.dpo_beta, actor.shuffle) == ("dpo", 100.0, False)
        assert config.actor_rollout_ref.rollout.n == 16 and actor.ppo_micro_batch_size_per_gpu == 8
    if path.parent.name == "flow_dppo":  # upstream's Flow-DPPO recipe values
        loss = config.actor_rollout_ref.actor.diffusion_loss
        assert (loss.loss_mode, loss.kl_mask_threshold, loss.add_kl_coefficient) == ("flow_dppo", 1e-5, True)
        assert config.data.train_batch_size // config.actor_rollout_ref.actor.ppo_mini_batch_size == 2


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_example_script_is_executable_bash_that_runs_the_trainer(path):
    assert os.access(path, os.X_OK), f"{path}: chmod +x"
    subprocess.run(["bash", "-n", str(path)], check=True, timeout=30)
    text = path.read_text()
    assert "exec verl-omni-train" in text and '"$@"' in text
    for name in (p.stem for p in CONFIGS if p.parent == path.parent):
        if f"--config-name {name}" in text:
            assert "--config-path" in text
