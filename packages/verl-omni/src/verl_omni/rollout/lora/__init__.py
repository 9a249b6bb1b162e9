"""LoRA merged into base weights for serving: `merge` (peft's arithmetic, `MergePlan`) > `kernel` (Triton).

Used by the diffusers engine (`verl_omni.rollout.diffusers.engine`); it imports no other rollout module. The package
imports nothing itself.
"""
