#!/usr/bin/env bash
# Online Diffusion-DPO on the tiny CPU quickstart (random-weight Qwen-Image, jpeg-compressibility reward; nothing
# downloaded): the quickstart with only the algorithm changed (its loss_mode and advantage estimator follow; upstream's
# default dpo_beta 2000). Each step trains the best and the worst of the 8 images of each of the 4 prompts; the first
# update starts at policy = reference (loss log 2, implicit reward margin 0). Extra arguments are Hydra overrides.
set -euo pipefail
exec verl-omni-train actor_rollout_ref.model.algorithm=dpo \
    trainer.experiment_name=quickstart_dpo trainer.run_dir=outputs/quickstart_dpo \
    trainer.default_local_dir=outputs/quickstart_dpo/checkpoints "$@"
