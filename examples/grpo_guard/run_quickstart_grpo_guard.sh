#!/usr/bin/env bash
# GRPO-Guard on the tiny CPU quickstart (random-weight Qwen-Image, jpeg-compressibility reward; nothing downloaded):
# the quickstart with only the loss mode changed. Its on-policy update (one mini-batch per step) takes the old
# log-probs and transition means from its own forwards, so the first update sees a normalised ratio of exactly 1.
# Extra arguments are Hydra overrides, e.g. trainer.total_training_steps=12.
set -euo pipefail
exec verl-omni-train actor_rollout_ref.actor.diffusion_loss.loss_mode=grpo_guard \
    trainer.experiment_name=quickstart_grpo_guard trainer.run_dir=outputs/quickstart_grpo_guard \
    trainer.default_local_dir=outputs/quickstart_grpo_guard/checkpoints "$@"
