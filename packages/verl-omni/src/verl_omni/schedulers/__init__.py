"""Flow-matching schedulers with per-step log-probabilities."""

from verl_omni.schedulers.flow_match_sde import (
    FlowMatchSDEDiscreteScheduler,
    FlowMatchSDESchedulerOutput,
    draw_sde_window,
    gaussian_log_prob,
    sde_transition,
)

__all__ = [
    "FlowMatchSDEDiscreteScheduler",
    "FlowMatchSDESchedulerOutput",
    "draw_sde_window",
    "gaussian_log_prob",
    "sde_transition",
]
