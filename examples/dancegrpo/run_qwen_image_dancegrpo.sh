#!/usr/bin/env bash
# DanceGRPO on Qwen-Image with LoRA, one node of 8 GPUs, the config next to this script (DanceGRPO's own settings).
# Extra arguments are Hydra overrides, e.g.
#   examples/dancegrpo/run_qwen_image_dancegrpo.sh actor_rollout_ref.model.path=/models/Qwen-Image \
#       data.train_files=/data/prompts/train.parquet data.val_files=/data/prompts/test.parquet
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec verl-omni-train --config-path "$here" --config-name qwen_image_dancegrpo "$@"
