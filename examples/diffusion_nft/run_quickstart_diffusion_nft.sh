#!/usr/bin/env bash
# DiffusionNFT on the tiny CPU quickstart (random-weight Qwen-Image, jpeg-compressibility reward; nothing downloaded):
# the quickstart with only the algorithm changed (`model.algorithm` is the default of the loss_mode and the advantage
# estimator). The rollout samples with the ODE (no log-probs), the update trains on forward-noised copies of the
# clean latents against an old-policy copy refreshed after every step; no old-log-prob or reference pass runs.
# Extra arguments are Hydra overrides, e.g. trainer.total_training_steps=12.
set -euo pipefail
exec verl-omni-train actor_rollout_ref.model.algorithm=diffusion_nft \
    trainer.experiment_name=quickstart_diffusion_nft trainer.run_dir=outputs/quickstart_diffusion_nft \
    trainer.default_local_dir=outputs/quickstart_diffusion_nft/checkpoints "$@"
