"""The `diffusers` rollout backend: an in-process diffusers pipeline served over HTTP.

Layers (import-linter): `server` (`DiffusersHttpServer`, rollout backend `diffusers`) > `engine_calls` (a batch's
engine calls, host trajectories) > `engine` (`DiffusersRolloutEngine`: pipeline, LoRA merge, sleep / wake, weight
loading) | `coalesce` (requests of equal sampling in one call) | `options` (`engine_kwargs.diffusers`) >
`host_offload` (sleep through pinned host copies) | `staging` (packed host-to-device copies). The LoRA merge lives
in `verl_omni.rollout.lora`, the request / response models both backends share in `verl_omni.rollout.protocol`.
The package imports nothing itself: `verl_omni.rollout` re-exports `DiffusersHttpServer` and `DiffusersRolloutEngine`.
"""
