#!/usr/bin/env bash
# MixGRPO on the tiny CPU quickstart (random-weight Qwen-Image, jpeg-compressibility reward; nothing downloaded): the
# quickstart with only sampler overrides. 2 of its 4 steps are SDE (trained), the rest ODE; the window starts at step
# 0 for training steps 1-3 and slides to 1 from step 4 (progressive, 4 steps per position).
# Extra arguments are Hydra overrides, e.g. trainer.total_training_steps=12.
set -euo pipefail
exec verl-omni-train actor_rollout_ref.rollout.algo.sample_strategy=progressive \
    actor_rollout_ref.rollout.algo.sde_window_size=2 'actor_rollout_ref.rollout.algo.sde_window_range=[0,3]' \
    actor_rollout_ref.rollout.algo.iters_per_group=4 \
    trainer.experiment_name=quickstart_mixgrpo trainer.run_dir=outputs/quickstart_mixgrpo \
    trainer.default_local_dir=outputs/quickstart_mixgrpo/checkpoints "$@"
