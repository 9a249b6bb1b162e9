"""The trainer config of online Diffusion-DPO (`model.algorithm=dpo`) and Flow-DPPO (`loss_mode=flow_dppo`): upstream's
keys and defaults, and each incompatible combination refused naming both keys (no Ray, nothing trained)."""

from __future__ import annotations

import operator

import pytest

from verl_core.config import ConfigValueError
from verl_omni.trainer.config import load_config

DPO = ["actor_rollout_ref.model.algorithm=dpo", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.model.lora_rank=8"]
DPPO = ["actor_rollout_ref.actor.diffusion_loss.loss_mode=flow_dppo"]


LOSS = "actor_rollout_ref.actor.diffusion_loss"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(DPO, {f"{LOSS}.loss_mode": "dpo", "algorithm.adv_estimator": "dpo", f"{LOSS}.dpo_beta": 2000.0,
                           "algorithm.paired_preference": False}, id="dpo"),
        pytest.param([*DPO, "algorithm.paired_preference=true"], {"algorithm.paired_preference": True}, id="dpo-pairs"),
        # upstream's online DPO recipe names its model type: accepted (and dropped, this project has one model type)
        pytest.param([*DPO, "+actor_rollout_ref.model.model_type=diffusion_dpo_model"],
                     {"algorithm.adv_estimator": "dpo"}, id="upstream-model-type"),
        pytest.param(DPPO, {f"{LOSS}.loss_mode": "flow_dppo", f"{LOSS}.kl_mask_threshold": 1e-5,
                            f"{LOSS}.add_kl_coefficient": True}, id="dppo"),
    ],
)  # fmt: skip
def test_upstream_keys_and_defaults(overrides, expected):
    config = load_config(overrides)
    assert {key: operator.attrgetter(key)(config) for key in expected} == expected


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        pytest.param([*DPO, "actor_rollout_ref.rollout.n=1"],
                     r"actor_rollout_ref\.rollout\.n: 1: .*loss_mode='dpo' pairs the best and the worst", id="n-1"),
        pytest.param([*DPO, "actor_rollout_ref.model.lora_rank=0"],
                     r"actor_rollout_ref\.model\.lora_rank: 0 .*loss_mode='dpo' needs the reference", id="full-ft"),
        pytest.param([*DPO, "actor_rollout_ref.actor.shuffle=true"],
                     r"actor_rollout_ref\.actor\.shuffle: true: .*loss_mode='dpo'", id="shuffle"),
        pytest.param([*DPO, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3"],
                     r"ppo_micro_batch_size_per_gpu: 3: .*loss_mode='dpo' trains whole", id="odd-micro"),
        pytest.param([*DPO, "data.train_batch_size=3", "trainer.n_gpus_per_node=2"],
                     r"data\.train_batch_size: 3 prompts .*loss_mode='dpo'.*over 2 actor ranks", id="split"),
        pytest.param([*DPO, "actor_rollout_ref.rollout.pipeline.true_cfg_scale=4.0"],
                     r"true_cfg_scale: .*loss_mode='dpo' trains on clean samples", id="cfg"),
        pytest.param([*DPO, "algorithm.rollout_correction.bypass_mode=true"],
                     r"bypass_mode: true: .*loss_mode='dpo'", id="bypass"),
        pytest.param([*DPO, "actor_rollout_ref.actor.use_kl_loss=true"],
                     r"actor_rollout_ref\.actor\.use_kl_loss: True: .*loss_mode='dpo' is already relative", id="kl"),
        pytest.param([*DPO, "actor_rollout_ref.actor.diffusion_loss.ref_kl_coef=0.1"],
                     r"diffusion_loss\.ref_kl_coef: 0\.1: .*loss_mode='dpo' is already relative", id="ref-kl"),
        pytest.param(["algorithm.paired_preference=true"],
                     r"algorithm\.paired_preference: true: .*loss_mode='flow_grpo'", id="pairs-without-dpo"),
        pytest.param([*DPPO, "actor_rollout_ref.rollout.algo.sde_type=cps"],
                     r"sde_type: 'cps': .*loss_mode='flow_dppo' holds only for sde_type in \['sde'\]", id="dppo-cps"),
        pytest.param([*DPPO, "algorithm.rollout_correction.bypass_mode=true"],
                     r"bypass_mode: true: .*loss_mode='flow_dppo' needs the old policy's transition means",
                     id="dppo-bypass"),
        pytest.param([*DPPO, "actor_rollout_ref.actor.diffusion_loss.kl_mask_threshold=-1"],
                     r"kl_mask_threshold: expected a float >= 0", id="dppo-tau"),
        pytest.param([*DPO, "actor_rollout_ref.actor.diffusion_loss.dpo_beta=0"],
                     r"dpo_beta: expected a float > 0", id="dpo-beta"),
    ],
)  # fmt: skip
def test_incompatible_combinations_are_refused_naming_both_keys(overrides, match):
    with pytest.raises(ConfigValueError, match=match):
        load_config(overrides)
