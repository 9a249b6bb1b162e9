#!/usr/bin/env bash
# Online Diffusion-DPO on Qwen-Image with LoRA, one node of 8 GPUs, the config next to this script (upstream's recipe
# values). Extra arguments are Hydra overrides, e.g.
#   examples/dpo/run_qwen_image_online_dpo.sh actor_rollout_ref.model.path=/models/Qwen-Image \
#       data.train_files=/data/ocr/train.parquet data.val_files=/data/ocr/test.parquet
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec verl-omni-train --config-path "$here" --config-name qwen_image_online_dpo "$@"
