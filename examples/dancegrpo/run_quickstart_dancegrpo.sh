#!/usr/bin/env bash
# DanceGRPO on the tiny CPU quickstart (random-weight Qwen-Image, jpeg-compressibility reward; nothing downloaded): the
# quickstart with one initial noise per prompt and 2 of its 3 SDE steps trained per image (timestep_fraction 0.7).
# Extra arguments are Hydra overrides, e.g. trainer.total_training_steps=12.
set -euo pipefail
exec verl-omni-train actor_rollout_ref.rollout.algo.init_same_noise=true algorithm.timestep_fraction=0.7 \
    trainer.experiment_name=quickstart_dancegrpo trainer.run_dir=outputs/quickstart_dancegrpo \
    trainer.default_local_dir=outputs/quickstart_dancegrpo/checkpoints "$@"
