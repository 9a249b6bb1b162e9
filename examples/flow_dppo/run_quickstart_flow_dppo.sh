#!/usr/bin/env bash
# Flow-DPPO on the tiny CPU quickstart (random-weight Qwen-Image, jpeg-compressibility reward; nothing downloaded):
# the quickstart with only the loss mode changed. Its update is on-policy (one mini-batch per step), so ρ = 1 and the
# KL mask never acts: add actor_rollout_ref.actor.ppo_mini_batch_size=2 to see it (two optimizer steps per batch).
# Extra arguments are Hydra overrides, e.g. trainer.total_training_steps=12.
set -euo pipefail
exec verl-omni-train actor_rollout_ref.actor.diffusion_loss.loss_mode=flow_dppo \
    trainer.experiment_name=quickstart_flow_dppo trainer.run_dir=outputs/quickstart_flow_dppo \
    trainer.default_local_dir=outputs/quickstart_flow_dppo/checkpoints "$@"
