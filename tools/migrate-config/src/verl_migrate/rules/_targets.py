"""Key prefixes and typed key names shared by the rule modules (not a rule module itself).

The `_target_` classes of the target's config come from `verl_migrate.target.target_class`.
"""

ARR = "actor_rollout_ref"
ROLLOUT = f"{ARR}.rollout"
VAL = f"{ROLLOUT}.val_kwargs"
MODEL = f"{ARR}.model"
ACTOR = f"{ARR}.actor"
REF = f"{ARR}.ref"

#: typed keys of verl-omni's DiffusionPipelineConfig and DiffusionRolloutAlgoConfig
PIPELINE_KEYS = (
    "true_cfg_scale",
    "max_sequence_length",
    "guidance_scale",
    "num_frames",
    "frame_rate",
    "video_flow_shift",
    "aspect_ratio",
)
ALGO_KEYS = (
    "noise_level",
    "sde_type",
    "sde_window_size",
    "sde_window_range",
    "sde_contiguous",
    "sample_strategy",
    "iters_per_group",
    "sde_window_seed",
)

#: the subset that verl-omni's `model.algo` mirror has (no sample_strategy, iters_per_group, sde_window_seed)
MODEL_ALGO_KEYS = ("noise_level", "sde_type", "sde_window_size", "sde_window_range", "sde_contiguous")
