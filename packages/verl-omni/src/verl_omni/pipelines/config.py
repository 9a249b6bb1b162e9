"""Old home of `DiffusionSamplingConfig`, kept so `verl_omni.pipelines.config` imports keep working.

The class lives in `verl_omni.config.sampling` (the config layer, below the pipelines: the rollout config builds it).
"""

from verl_omni.config.sampling import DiffusionSamplingConfig

__all__ = ["DiffusionSamplingConfig"]
