from verl_migrate_cases import flagged, noop, rewrite

CASES = [
    rewrite(
        "model-height-to-pipeline",
        """
        actor_rollout_ref:
          model:
            path: ~/models/Qwen/Qwen-Image
            height: ${oc.select:actor_rollout_ref.rollout.height,512}
        """,
        """
        actor_rollout_ref:
          model:
            path: ~/models/Qwen/Qwen-Image
            pipeline:
              height: ${oc.select:actor_rollout_ref.rollout.height,512}
        """,
    ),
    noop("model-height-to-pipeline", "actor_rollout_ref.model.pipeline.height=256", fmt="overrides"),
    rewrite(
        "model-width-to-pipeline",
        "actor_rollout_ref.model.width=64",
        "actor_rollout_ref.model.pipeline.width=64",
        fmt="overrides",
    ),
    noop("model-width-to-pipeline", "actor_rollout_ref.rollout.width=64", fmt="overrides"),
    rewrite(
        "model-num-inference-steps-to-pipeline",
        "actor_rollout_ref.model.num_inference_steps=4",
        "actor_rollout_ref.model.pipeline.num_inference_steps=4",
        fmt="overrides",
    ),
    noop(
        "model-num-inference-steps-to-pipeline",
        "actor_rollout_ref.model.pipeline.num_inference_steps=4",
        fmt="overrides",
    ),
    rewrite(
        "model-extra-configs-split",
        """
        actor_rollout_ref:
          model:
            lora_rank: 8
            extra_configs: ${oc.select:actor_rollout_ref.rollout.extra_configs,{}}
        """,
        """
        actor_rollout_ref:
          model:
            lora_rank: 8
        """,
    ),
    noop(
        "model-extra-configs-split",
        """
        actor_rollout_ref:
          model:
            algo:
              noise_level: 1.0
        """,
    ),
    rewrite(
        "lora-rank-default",
        "actor_rollout_ref.model.path=/m",
        """
        actor_rollout_ref.model.path=/m
        actor_rollout_ref.model.lora_rank=32
        """,
        fmt="overrides",
    ),
    noop("lora-rank-default", "actor_rollout_ref.model.lora_rank=0", fmt="overrides"),
    rewrite(
        "drop-example-model-external-lib",
        """
        actor_rollout_ref:
          model:
            path: /m
            external_lib: "examples.flowgrpo_trainer.diffusers.qwen_image"
        """,
        """
        actor_rollout_ref:
          model:
            path: /m
        """,
    ),
    noop("drop-example-model-external-lib", "actor_rollout_ref.model.external_lib=my_pkg.adapters", fmt="overrides"),
    flagged("tokenizer-path-fallback", "actor_rollout_ref.model.tokenizer_path=null"),
    noop("tokenizer-path-fallback", "actor_rollout_ref.model.tokenizer_path=/m/tokenizer", fmt="overrides"),
    flagged("attn-backend-fa3-default", "trainer.total_epochs=1"),
    noop("attn-backend-fa3-default", "actor_rollout_ref.model.attn_backend=native", fmt="overrides"),
]
