"""DanceGRPO's keys in the trainer config: `algorithm.timestep_fraction` < 1 and `rollout.algo.init_same_noise` with
FlowGRPO's loss; out-of-range fractions are refused naming the key."""

from __future__ import annotations

import pytest

from verl_core.config.errors import ConfigValueError
from verl_omni.trainer.config import load_config


def test_dance_grpo_keys_build_with_the_flow_grpo_loss():
    config = load_config(
        ["algorithm.timestep_fraction=0.6", "actor_rollout_ref.rollout.algo.init_same_noise=true"],
        config_name="quickstart",
    )
    assert config.actor_rollout_ref.actor.diffusion_loss.loss_mode == "flow_grpo"
    assert config.algorithm.timestep_fraction == 0.6
    sampling = config.actor_rollout_ref.rollout.sampling_config("qwen_image")
    assert sampling.init_same_noise is True


@pytest.mark.parametrize("fraction", [0.0, 1.5])
def test_a_timestep_fraction_outside_0_1_is_refused_naming_the_key(fraction):
    with pytest.raises(ConfigValueError, match=r"algorithm\.timestep_fraction"):
        load_config([f"algorithm.timestep_fraction={fraction}"], config_name="quickstart")
