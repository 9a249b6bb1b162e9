from verl_migrate_cases import noop, rewrite

CASES = [
    rewrite(
        "actor-clip-ratio-to-diffusion-loss",
        """
        actor_rollout_ref:
          actor:
            strategy: fsdp
            clip_ratio: 0.0001  # trust region
            ppo_epochs: 1
        """,
        """
        actor_rollout_ref:
          actor:
            strategy: fsdp
            diffusion_loss:
              clip_ratio: 0.0001  # trust region
            ppo_epochs: 1
        """,
    ),
    noop(
        "actor-clip-ratio-to-diffusion-loss", "actor_rollout_ref.actor.diffusion_loss.clip_ratio=1e-5", fmt="overrides"
    ),
    rewrite(
        "actor-clip-ratio-high-to-adv-clip-max",
        "actor_rollout_ref.actor.clip_ratio_high=5.0",
        "actor_rollout_ref.actor.diffusion_loss.adv_clip_max=5.0",
        fmt="overrides",
    ),
    noop(
        "actor-clip-ratio-high-to-adv-clip-max",
        "actor_rollout_ref.actor.diffusion_loss.adv_clip_max=3.0",
        fmt="overrides",
    ),
    rewrite(
        "drop-policy-loss-vanilla",
        """
        actor_rollout_ref:
          actor:
            policy_loss:
              loss_mode: vanilla
        """,
        "{}\n",
    ),
    noop("drop-policy-loss-vanilla", "actor_rollout_ref.actor.policy_loss.loss_mode=flow_grpo", fmt="overrides"),
    rewrite(
        "actor-policy-loss-mode-to-diffusion-loss",
        "actor_rollout_ref.actor.policy_loss.loss_mode=flow_grpo",
        "actor_rollout_ref.actor.diffusion_loss.loss_mode=flow_grpo",
        fmt="overrides",
    ),
    noop(
        "actor-policy-loss-mode-to-diffusion-loss",
        "actor_rollout_ref.actor.diffusion_loss.loss_mode=flow_grpo",
        fmt="overrides",
    ),
    rewrite(
        "drop-policy-loss-extras",
        """
        actor_rollout_ref:
          actor:
            ppo_epochs: 1
            policy_loss:
              _target_: verl.workers.config.PolicyLossConfig
              clip_cov_ratio: 0.0002
              ppo_kl_coef: 0.1
        """,
        """
        actor_rollout_ref:
          actor:
            ppo_epochs: 1
        """,
    ),
    noop("drop-policy-loss-extras", "actor_rollout_ref.actor.ppo_epochs=1", fmt="overrides"),
    rewrite(
        "drop-ulysses-sequence-parallel",
        """
        actor_rollout_ref.actor.ulysses_sequence_parallel_size=1
        actor_rollout_ref.ref.ulysses_sequence_parallel_size=1
        trainer.nnodes=1
        """,
        "trainer.nnodes=1",
        fmt="overrides",
    ),
    noop(
        "drop-ulysses-sequence-parallel",
        "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
        fmt="overrides",
    ),
    rewrite(
        "drop-actor-llm-knobs",
        """
        actor_rollout_ref:
          actor:
            ppo_mini_batch_size: 16
            use_dynamic_bsz: false
            loss_agg_mode: token-mean
            checkpoint:
              async_save: false
              mbridge_config: {}
        """,
        """
        actor_rollout_ref:
          actor:
            ppo_mini_batch_size: 16
            checkpoint:
              async_save: false
        """,
    ),
    noop("drop-actor-llm-knobs", "actor_rollout_ref.actor.ppo_mini_batch_size=16", fmt="overrides"),
    rewrite(
        "drop-ref-llm-knobs",
        """
        actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32
        actor_rollout_ref.ref.log_prob_use_dynamic_bsz=true
        """,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
        fmt="overrides",
    ),
    noop("drop-ref-llm-knobs", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32", fmt="overrides"),
    rewrite(
        "drop-fsdp-llm-knobs",
        """
        actor_rollout_ref:
          ref:
            fsdp_config:
              param_offload: true
              use_torch_compile: true
              qat:
                enable: false
        """,
        """
        actor_rollout_ref:
          ref:
            fsdp_config:
              param_offload: true
        """,
    ),
    noop("drop-fsdp-llm-knobs", "actor_rollout_ref.actor.fsdp_config.param_offload=True", fmt="overrides"),
]
