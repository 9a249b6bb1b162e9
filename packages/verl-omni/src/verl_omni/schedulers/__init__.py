"""Flow-matching schedulers with per-step log-probabilities, and how a trajectory stores their settings."""

from verl_omni.schedulers.flow_match_sde import (
    FlowMatchSDEDiscreteScheduler,
    FlowMatchSDESchedulerOutput,
    draw_sde_window,
    gaussian_log_prob,
    sde_transition,
)
from verl_omni.schedulers.settings import CPS_LOGPROBS, SDE_TYPES, TRAJECTORY_SETTINGS, setting_code, setting_name

__all__ = [
    "CPS_LOGPROBS",
    "SDE_TYPES",
    "TRAJECTORY_SETTINGS",
    "FlowMatchSDEDiscreteScheduler",
    "FlowMatchSDESchedulerOutput",
    "draw_sde_window",
    "gaussian_log_prob",
    "sde_transition",
    "setting_code",
    "setting_name",
]
