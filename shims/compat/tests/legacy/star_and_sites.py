"""Legacy-style script: `from … import *`, attribute access on a trimmed module, the same site hit three times."""

import verl.workers.config as workers_config
from verl.trainer.diffusion.diffusion_algos import *  # noqa: F403

for _ in range(3):
    cls = workers_config.DiffusionModelConfig  # one site, three uses: one warning

assert compute_flow_grpo_outcome_advantage.__module__ == "verl_compat.adapters"  # noqa: F405
assert "DiffusionRolloutConfig" in dir(workers_config)
print("OK")
