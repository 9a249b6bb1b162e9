"""`translate_overrides` (the compat shim's entry): prefixes, quoting, lists, groups and conflicts."""

import pytest

from verl_migrate import translate_overrides
from verl_migrate.errors import ConflictError

BASE = [
    "actor_rollout_ref.model.lora_rank=8",
    "actor_rollout_ref.rollout.val_kwargs.num_inference_steps=4",
    "actor_rollout_ref.rollout.val_kwargs.algo.noise_level=0.0",
]


def _t(*words: str) -> list[str]:
    return translate_overrides([*words, *BASE]).overrides[: len(words)]


def test_prefixes() -> None:
    assert _t("~actor_rollout_ref.rollout.height") == ["~actor_rollout_ref.rollout.pipeline.height"]
    assert _t("++actor_rollout_ref.rollout.height=64") == ["++actor_rollout_ref.rollout.pipeline.height=64"]
    assert _t("+actor_rollout_ref.rollout.extra_configs.noise_level=1.1") == [
        "actor_rollout_ref.rollout.algo.noise_level=1.1"
    ]
    assert _t("+actor_rollout_ref.rollout.extra_configs.sigmas=[1.0,0.5]") == [
        "+actor_rollout_ref.rollout.extra_configs.sigmas=[1.0,0.5]"
    ]


def test_quoted_and_list_values_kept() -> None:
    window = "+actor_rollout_ref.rollout.extra_configs.sde_window_size=2"
    assert _t("+actor_rollout_ref.rollout.extra_configs.sde_window_range='[0, 5]'", window) == [
        "actor_rollout_ref.rollout.algo.sde_window_range='[0, 5]'",
        "actor_rollout_ref.rollout.algo.sde_window_size=2",
    ]
    assert _t("trainer.logger=[console,wandb]") == ["trainer.logger=[console,wandb]"]
    assert _t("reward.reward_manager.name='visual'") == ["reward.reward_manager.name=VisualRewardManager"]


def test_group_overrides_and_non_overrides() -> None:
    assert _t("model_engine=dp") == ["diffusion/model_engine=dp_diffusion"]
    assert _t("--config-name=my_cfg", "hydra.run.dir=/tmp/x") == ["--config-name=my_cfg", "hydra.run.dir=/tmp/x"]


def test_interpolation_in_value_follows_the_move() -> None:
    assert _t("trainer.experiment_name=run_${actor_rollout_ref.rollout.height}") == [
        "trainer.experiment_name=run_${actor_rollout_ref.rollout.pipeline.height}"
    ]


def test_explicit_defaults_are_appended() -> None:
    res = translate_overrides(["trainer.nnodes=1"])
    assert res.overrides == [
        "trainer.nnodes=1",
        "actor_rollout_ref.model.lora_rank=32",
        "actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=40",
    ]
    assert res.changed
    assert {f.rule_id for f in res.report.findings if f.category == "semantic"} >= {
        "lora-rank-default",
        "val-num-inference-steps-default",
        "val-noise-level-default",
    }


def test_unknown_overrides_kept_and_reported() -> None:
    res = translate_overrides(["trainer.my_flag=1", *BASE])
    assert res.overrides[0] == "trainer.my_flag=1"
    assert [f.path for f in res.report.findings if f.category == "unknown"] == ["trainer.my_flag"]


def test_deleting_an_unknown_key_is_reported() -> None:
    res = translate_overrides(["~trainer.my_flag", "~actor_rollout_ref.rollout.height", *BASE])
    assert res.overrides[:2] == ["~trainer.my_flag", "~actor_rollout_ref.rollout.pipeline.height"]
    unknown = [f for f in res.report.findings if f.category == "unknown"]
    assert [f.path for f in unknown] == ["~trainer.my_flag"]
    assert "Hydra will refuse it" in unknown[0].message


def test_conflict_names_both_keys() -> None:
    with pytest.raises(
        ConflictError,
        match=r"`actor_rollout_ref.rollout.height` \(256\) and `actor_rollout_ref.rollout.pipeline.height` \(512\)",
    ):
        translate_overrides(["actor_rollout_ref.rollout.height=256", "actor_rollout_ref.rollout.pipeline.height=512"])


def test_translation_is_idempotent() -> None:
    once = translate_overrides(
        ["+actor_rollout_ref.rollout.extra_configs.noise_level=1.2", "algorithm.adv_estimator=flow_grpo"]
    )
    twice = translate_overrides(once.overrides)
    assert twice.overrides == once.overrides and not twice.changed
