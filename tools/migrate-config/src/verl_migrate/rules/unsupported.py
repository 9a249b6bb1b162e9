"""Keys for features this project's trainer does not implement (issue 13; the trainer's `prune_unsupported`).

The key moves follow upstream verl-omni; what this project's config lacks is the difference of the two key trees
(`data/upstream_verl_omni_a1139baf.flat.txt` minus the generated target tree), so it follows the target when
`scripts/gen_target.py` regenerates it. The keys below are in this project's config but only at their default.
"""

from verl_migrate.kinds.target import FitTarget
from verl_migrate.rule_base import register

#: feature names of upstream-only key prefixes, for the report (longest first)
FEATURES = (
    ("actor_rollout_ref.model.pipeline", "the model's copy of the sampling settings (set `rollout.pipeline.*`)"),
    ("actor_rollout_ref.model.algo", "the model's copy of the SDE settings (set `rollout.algo.*`)"),
    ("actor_rollout_ref.rollout.engine_kwargs", "rollout engine arguments"),
    ("actor_rollout_ref.rollout.agent", "agent loops"),
    ("actor_rollout_ref.actor.profiler", "the profiler"),
    ("actor_rollout_ref.ref.profiler", "the profiler"),
    ("actor_rollout_ref.rollout.profiler", "the profiler"),
    ("global_profiler", "the profiler"),
    ("distillation", "diffusion distillation"),
    ("transfer_queue", "the TransferQueue data plane"),
    ("trainer.v1", "verl-omni's v1 trainer"),
    ("skip", "rollout skipping"),
    ("critic", "a critic"),
    ("reward.reward_model.rollout", "a reward-model engine option this project's servers do not take"),
)

#: keys this project's config has but accepts only at their default (the trainer rejects other values)
ONLY_DEFAULT = (
    ("reward.sandbox_fusion.url", "sandbox fusion"),
    ("algorithm.rollout_correction.rollout_is", "importance-sampling rollout correction"),
    ("algorithm.rollout_correction.rollout_rs", "rejection-sampling rollout correction"),
    ("trainer.use_v1", "verl-omni's v1 trainer"),
    ("data.use_shm", "shared-memory datasets"),
    ("data.tool_config_path", "tool calling"),
    ("data.filter_overlong_prompts", "prompt filtering"),
    ("actor_rollout_ref.hybrid_engine", "a separate rollout pool (only colocated rollout)"),
    ("actor_rollout_ref.actor.checkpoint.async_save", "asynchronous checkpoint saving"),
    ("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size", "sequence parallelism"),
    ("ray_kwargs.timeline_json_file", "Ray timeline dumps"),
)

register(
    FitTarget(
        id="target-unsupported",
        since="0.2.0",
        summary="Upstream verl-omni keys this project's config lacks are removed; switched-on ones are reported.",
        features=FEATURES,
    )
)

register(
    FitTarget(
        id="target-default-only",
        since="0.2.0",
        summary="Keys this project's trainer accepts only at their default are removed when set; each is reported.",
        # the rule is about this project's trainer: it runs when the target is that config
        when_target=(("reward._target_", "verl_omni.reward.RewardConfig"),),
        only_default=ONLY_DEFAULT,
    )
)
