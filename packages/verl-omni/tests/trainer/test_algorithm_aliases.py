"""Upstream's `model.algorithm: mix_grpo | dance_grpo`: FlowGRPO's loss and advantages under their names, checked
against the sampler keys that make them MixGRPO / DanceGRPO."""

from __future__ import annotations

import pytest

BASE = ["actor_rollout_ref.model.path=/nonexistent/pipeline"]  # the folder is checked later, by the preflight


@pytest.mark.parametrize(
    ("algorithm", "sampler"),
    [
        ("mix_grpo", "actor_rollout_ref.rollout.algo.sde_window_size=2"),
        ("dance_grpo", "actor_rollout_ref.rollout.algo.init_same_noise=true"),
    ],
)
def test_upstream_algorithm_names_train_flow_grpo_with_their_sampler(algorithm, sampler):
    """The loss_mode and the advantage estimator follow `model.algorithm` (the shipped YAML) and resolve to the one
    FlowGRPO loss function; without the sampler key the config is refused naming it and the way out."""
    from verl_core.config.errors import ConfigValueError
    from verl_omni.algos import get_loss
    from verl_omni.trainer.config import load_config

    config = load_config([*BASE, f"actor_rollout_ref.model.algorithm={algorithm}", sampler])
    assert config.actor_rollout_ref.actor.diffusion_loss.loss_mode == algorithm
    assert config.algorithm.adv_estimator == algorithm
    assert get_loss(algorithm) is get_loss("flow_grpo")
    key = sampler.split("=")[0]
    with pytest.raises(ConfigValueError, match=rf"{key}.*model.algorithm='{algorithm}'.*model.algorithm=flow_grpo"):
        load_config([*BASE, f"actor_rollout_ref.model.algorithm={algorithm}"])
