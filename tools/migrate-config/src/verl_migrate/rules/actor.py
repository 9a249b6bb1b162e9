"""Actor/ref keys.

The diffusion loss gets its own `actor.diffusion_loss` block; LLM-only knobs are gone (verl-omni REF0/E/da8018b5,
legacy_surface.md §3.4 rows 27-31 and §3.3(c)).
"""

from verl_migrate.kinds import Drop, RenameKey
from verl_migrate.rule_base import register
from verl_migrate.rules._targets import ACTOR, REF

_CREATES = (f"{ACTOR}.diffusion_loss",)

register(
    RenameKey(
        id="actor-clip-ratio-to-diffusion-loss",
        since="0.1.0",
        summary="`actor.clip_ratio` moved to `actor.diffusion_loss.clip_ratio`.",
        refs=(27,),
        old=f"{ACTOR}.clip_ratio",
        new=f"{ACTOR}.diffusion_loss.clip_ratio",
        creates=_CREATES,
    )
)

register(
    RenameKey(
        id="actor-clip-ratio-high-to-adv-clip-max",
        since="0.1.0",
        summary="`actor.clip_ratio_high` (the advantage clamp) is now `actor.diffusion_loss.adv_clip_max`.",
        refs=(28,),
        old=f"{ACTOR}.clip_ratio_high",
        new=f"{ACTOR}.diffusion_loss.adv_clip_max",
        creates=_CREATES,
    )
)

register(
    Drop(
        id="drop-policy-loss-vanilla",
        since="0.1.0",
        summary="`policy_loss.loss_mode: vanilla` (LLM default) is dropped; the loss follows `model.algorithm`.",
        refs=(29,),
        paths=(f"{ACTOR}.policy_loss.loss_mode",),
        when=("vanilla",),
        note="verl-omni's `diffusion_loss.loss_mode` defaults to `model.algorithm` (flow_grpo)",
        early=True,
    )
)

register(
    RenameKey(
        id="actor-policy-loss-mode-to-diffusion-loss",
        since="0.1.0",
        summary="`actor.policy_loss.loss_mode` moved to `actor.diffusion_loss.loss_mode`.",
        refs=(29,),
        old=f"{ACTOR}.policy_loss.loss_mode",
        new=f"{ACTOR}.diffusion_loss.loss_mode",
        creates=_CREATES,
    )
)

register(
    Drop(
        id="drop-policy-loss-extras",
        since="0.1.0",
        summary="The LLM policy-loss knobs `actor.policy_loss.*` (clip-cov, kl-cov, `_target_`) are gone.",
        refs=(30,),
        paths=(f"{ACTOR}.policy_loss",),
        note="only LLM policy losses read these",
    )
)

register(
    Drop(
        id="drop-ulysses-sequence-parallel",
        since="0.1.0",
        summary="`actor/ref.ulysses_sequence_parallel_size` are gone; SP is `actor.fsdp_config.ulysses_*`.",
        refs=(31,),
        paths=(f"{ACTOR}.ulysses_sequence_parallel_size", f"{REF}.ulysses_sequence_parallel_size"),
        note="for sequence parallelism set `actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size` "
        "(equivalence unverified)",
    )
)

register(
    Drop(
        id="drop-actor-llm-knobs",
        since="0.1.0",
        summary="LLM-only actor knobs (dynamic batch size, token budgets, PPO clip variants, QAT, ...) are gone.",
        paths=tuple(
            f"{ACTOR}.{k}"
            for k in (
                "ppo_micro_batch_size",
                "use_dynamic_bsz",
                "ppo_max_token_len_per_gpu",
                "clip_ratio_low",
                "clip_ratio_c",
                "tau_pos",
                "tau_neg",
                "freeze_vision_tower",
                "loss_agg_mode",
                "entropy_coeff",
                "calculate_entropy",
                "calculate_sum_pi_squared",
                "use_prefix_grouper",
                "use_torch_compile",
                "kl_loss_type",
                "use_fused_kernels",
                "entropy_from_logits_with_chunking",
                "entropy_checkpointing",
                "use_remove_padding",
                "checkpoint.mbridge_config",
                "router_replay",
                "qat",
            )
        ),
        note="the diffusion actor does not read this LLM knob",
    )
)

register(
    Drop(
        id="drop-ref-llm-knobs",
        since="0.1.0",
        summary="LLM-only ref knobs (log-prob token budgets, torch.compile, entropy, router replay) are gone.",
        paths=tuple(
            f"{REF}.{k}"
            for k in (
                "use_torch_compile",
                "log_prob_micro_batch_size",
                "log_prob_use_dynamic_bsz",
                "log_prob_max_token_len_per_gpu",
                "entropy_from_logits_with_chunking",
                "entropy_checkpointing",
                "router_replay",
            )
        ),
        note="the diffusion reference model does not read this LLM knob",
    )
)

register(
    Drop(
        id="drop-fsdp-llm-knobs",
        since="0.1.0",
        summary="`fsdp_config.{entropy_*,use_torch_compile,qat}` of actor and ref are gone.",
        paths=tuple(
            f"actor_rollout_ref.{role}.fsdp_config.{k}"
            for role in ("actor", "ref")
            for k in ("entropy_from_logits_with_chunking", "use_torch_compile", "entropy_checkpointing", "qat")
        ),
        note="LLM-only FSDP engine knob",
    )
)
