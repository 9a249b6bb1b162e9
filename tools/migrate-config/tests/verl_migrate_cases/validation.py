from verl_migrate_cases import flagged, noop, rewrite

CASES = [
    rewrite(
        "val-num-inference-steps-to-pipeline",
        """
        actor_rollout_ref:
          rollout:
            val_kwargs:
              n: 1
              num_inference_steps: 40  # validation steps
        """,
        """
        actor_rollout_ref:
          rollout:
            val_kwargs:
              n: 1
              pipeline:
                num_inference_steps: 40  # validation steps
        """,
    ),
    noop("val-num-inference-steps-to-pipeline", "actor_rollout_ref.rollout.val_kwargs.n=2", fmt="overrides"),
    rewrite(
        "val-extra-configs-split",
        """
        +actor_rollout_ref.rollout.val_kwargs.extra_configs.noise_level=0.0
        +actor_rollout_ref.rollout.val_kwargs.extra_configs.true_cfg_scale=4.0
        """,
        """
        actor_rollout_ref.rollout.val_kwargs.algo.noise_level=0.0
        actor_rollout_ref.rollout.val_kwargs.pipeline.true_cfg_scale=4.0
        """,
        fmt="overrides",
    ),
    noop("val-extra-configs-split", "actor_rollout_ref.rollout.val_kwargs.algo.noise_level=0.0", fmt="overrides"),
    rewrite(
        "drop-val-llm-sampling",
        """
        actor_rollout_ref:
          rollout:
            val_kwargs:
              top_k: -1
              top_p: 1.0
              temperature: 0
              n: 1
              do_sample: false
        """,
        """
        actor_rollout_ref:
          rollout:
            val_kwargs:
              n: 1
        """,
    ),
    noop("drop-val-llm-sampling", "actor_rollout_ref.rollout.val_kwargs.n=1", fmt="overrides"),
    rewrite(
        "val-num-inference-steps-default",
        "trainer.total_epochs=3",
        """
        trainer.total_epochs=3
        actor_rollout_ref.rollout.val_kwargs.pipeline.num_inference_steps=40
        """,
        fmt="overrides",
    ),
    noop(
        "val-num-inference-steps-default",
        "actor_rollout_ref.rollout.val_kwargs.num_inference_steps=4",
        fmt="overrides",
    ),
    rewrite(
        "val-noise-level-inherits-train",
        "actor_rollout_ref.rollout.algo.noise_level=1.2",
        """
        actor_rollout_ref.rollout.algo.noise_level=1.2
        actor_rollout_ref.rollout.val_kwargs.algo.noise_level=1.2
        """,
        fmt="overrides",
    ),
    noop(
        "val-noise-level-inherits-train",
        """
        actor_rollout_ref.rollout.algo.noise_level=1.2
        actor_rollout_ref.rollout.val_kwargs.algo.noise_level=0.0
        """,
        fmt="overrides",
    ),
    flagged("val-noise-level-default", "trainer.total_epochs=3"),
    noop("val-noise-level-default", "actor_rollout_ref.rollout.val_kwargs.algo.noise_level=0.0", fmt="overrides"),
]
