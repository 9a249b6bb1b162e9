"""Class paths and key prefixes shared by the rule modules (not a rule module itself)."""

ARR = "actor_rollout_ref"
ROLLOUT = f"{ARR}.rollout"
VAL = f"{ROLLOUT}.val_kwargs"
MODEL = f"{ARR}.model"
ACTOR = f"{ARR}.actor"
REF = f"{ARR}.ref"

_CFG = "verl_omni.workers.config.diffusion"
PIPELINE_T = f"{_CFG}.DiffusionPipelineConfig"
ALGO_T = f"{_CFG}.DiffusionRolloutAlgoConfig"
LOSS_T = f"{_CFG}.DiffusionLossConfig"
SKIP_T = "verl.utils.skip.SkipManagerConfig"

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
