#!/usr/bin/env bash
# MixGRPO on Qwen-Image with LoRA, one node of 8 GPUs, the config next to this script (upstream's recipe values).
# Extra arguments are Hydra overrides, e.g.
#   examples/mixgrpo/run_qwen_image_mixgrpo.sh actor_rollout_ref.model.path=/models/Qwen-Image \
#       actor_rollout_ref.rollout.algo.sample_strategy=progressive actor_rollout_ref.rollout.algo.iters_per_group=25
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec verl-omni-train --config-path "$here" --config-name qwen_image_mixgrpo "$@"
