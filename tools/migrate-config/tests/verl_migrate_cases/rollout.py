from verl_migrate_cases import flagged, noop, rewrite

CASES = [
    rewrite(
        "rollout-height-to-pipeline",
        """
        actor_rollout_ref:
          rollout:
            name: vllm_omni  # engine
            height: 256  # px
            n: 16
        """,
        """
        actor_rollout_ref:
          rollout:
            name: vllm_omni  # engine
            pipeline:
              height: 256  # px
            n: 16
        """,
    ),
    noop(
        "rollout-height-to-pipeline",
        """
        actor_rollout_ref:
          rollout:
            pipeline:
              height: 256
        """,
    ),
    rewrite(
        "rollout-width-to-pipeline",
        "actor_rollout_ref.rollout.width=256",
        "actor_rollout_ref.rollout.pipeline.width=256",
        fmt="overrides",
    ),
    noop("rollout-width-to-pipeline", "actor_rollout_ref.rollout.pipeline.width=256", fmt="overrides"),
    rewrite(
        "rollout-num-inference-steps-to-pipeline",
        """
        actor_rollout_ref:
          rollout:
            num_inference_steps: 4
        """,
        """
        actor_rollout_ref:
          rollout:
            pipeline:
              num_inference_steps: 4
        """,
    ),
    noop("rollout-num-inference-steps-to-pipeline", "actor_rollout_ref.model.num_inference_steps=4", fmt="overrides"),
    rewrite(
        "rollout-extra-configs-split",
        """
        actor_rollout_ref:
          rollout:
            extra_configs:
              true_cfg_scale: 4.0
              noise_level: 1.2  # train noise
              sde_window_range: [0, 5]
        """,
        """
        actor_rollout_ref:
          rollout:
            pipeline:
              true_cfg_scale: 4.0
            algo:
              noise_level: 1.2  # train noise
              sde_window_range: [0, 5]
        """,
    ),
    noop(
        "rollout-extra-configs-split",
        """
        actor_rollout_ref:
          rollout:
            algo:
              noise_level: 1.2
        """,
    ),
    rewrite(
        "drop-builtin-custom-pipeline",
        """
        actor_rollout_ref.rollout.name=vllm_omni
        +actor_rollout_ref.rollout.engine_kwargs.vllm_omni.custom_pipeline=examples.flowgrpo_trainer.vllm_omni.pipeline_qwenimage.QwenImagePipelineWithLogProb
        """,
        "actor_rollout_ref.rollout.name=vllm_omni",
        fmt="overrides",
    ),
    noop(
        "drop-builtin-custom-pipeline",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.custom_pipeline=my_pkg.MyPipeline",
        fmt="overrides",
    ),
    flagged(
        "custom-pipeline-needs-external-lib",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.custom_pipeline=my_pkg.MyPipeline",
    ),
    noop("custom-pipeline-needs-external-lib", "actor_rollout_ref.rollout.external_lib=my_pkg", fmt="overrides"),
    rewrite(
        "drop-llm-engine-kwargs",
        """
        actor_rollout_ref:
          rollout:
            engine_kwargs:
              vllm: {}
              sglang: {}
              vllm_omni: {}
        """,
        """
        actor_rollout_ref:
          rollout:
            engine_kwargs:
              vllm_omni: {}
        """,
    ),
    noop(
        "drop-llm-engine-kwargs",
        """
        actor_rollout_ref:
          rollout:
            engine_kwargs:
              vllm_omni: {}
        """,
    ),
    rewrite(
        "rollout-skip-to-top-level",
        """
        actor_rollout_ref:
          rollout:
            skip:
              enable: true
              dump_dir: /tmp/dump
        trainer:
          total_epochs: 1
        """,
        """
        skip:
          rollout:
            enable: true
            dump_dir: /tmp/dump
        trainer:
          total_epochs: 1
        """,
    ),
    noop("rollout-skip-to-top-level", "skip.rollout.enable=true", fmt="overrides"),
    rewrite(
        "drop-rollout-skip-legacy-fields",
        """
        actor_rollout_ref:
          rollout:
            n: 1
            skip:
              _target_: verl.workers.config.SkipConfig
              max_dump_step: 1
        """,
        """
        actor_rollout_ref:
          rollout:
            n: 1
        """,
    ),
    noop("drop-rollout-skip-legacy-fields", "skip.rollout.steps=[1,2]", fmt="overrides"),
    rewrite(
        "agent-loop-diffusion-default",
        """
        actor_rollout_ref:
          rollout:
            agent:
              default_agent_loop: single_turn_agent
        """,
        """
        actor_rollout_ref:
          rollout:
            agent:
              default_agent_loop: diffusion_single_turn_agent
        """,
    ),
    noop(
        "agent-loop-diffusion-default",
        "actor_rollout_ref.rollout.agent.default_agent_loop=diffusion_single_turn_agent",
        fmt="overrides",
    ),
    rewrite(
        "drop-rollout-llm-knobs",
        """
        actor_rollout_ref:
          rollout:
            n: 4
            response_length: 512
            multi_turn:
              enable: false
              max_user_turns: null
            trace:
              backend: null
        """,
        """
        actor_rollout_ref:
          rollout:
            n: 4
            multi_turn:
              enable: false
        """,
    ),
    noop("drop-rollout-llm-knobs", "actor_rollout_ref.rollout.multi_turn.enable=false", fmt="overrides"),
    flagged("rollout-mode-sync-rejected", "actor_rollout_ref.rollout.mode=sync"),
    noop("rollout-mode-sync-rejected", "actor_rollout_ref.rollout.mode=async", fmt="overrides"),
    rewrite(
        "sde-window-range-default",
        "actor_rollout_ref.rollout.algo.sde_window_size=2",
        """
        actor_rollout_ref.rollout.algo.sde_window_size=2
        actor_rollout_ref.rollout.algo.sde_window_range=[0,5]
        """,
        fmt="overrides",
    ),
    noop(
        "sde-window-range-default",
        """
        actor_rollout_ref.rollout.algo.sde_window_size=2
        actor_rollout_ref.rollout.algo.sde_window_range=[0,4]
        """,
        fmt="overrides",
    ),
    rewrite(
        "sde-window-range-without-size",
        "actor_rollout_ref.rollout.algo.sde_window_range=[0,5]\ntrainer.total_training_steps=1",
        "trainer.total_training_steps=1",
        fmt="overrides",
    ),
    rewrite(
        "sde-window-range-without-size",
        """
        actor_rollout_ref:
          rollout:
            algo:
              noise_level: 0.9
              sde_window_size: null
              sde_window_range: [0, 5]  # the old pipeline default
        """,
        """
        actor_rollout_ref:
          rollout:
            algo:
              noise_level: 0.9
              sde_window_size: null
        """,
    ),
    noop(
        "sde-window-range-without-size",
        "actor_rollout_ref.rollout.algo.sde_window_size=2\nactor_rollout_ref.rollout.algo.sde_window_range=[0,5]",
        fmt="overrides",
    ),
    noop(
        "sde-window-range-without-size",
        """
        # @package actor_rollout_ref.rollout
        # a rollout group file: the root config may set the window size
        algo:
          sde_window_range: [0, 5]
        """,
    ),
    flagged("prompt-embed-padding-length", "data.max_prompt_length=256"),
    noop(
        "prompt-embed-padding-length",
        "+actor_rollout_ref.rollout.extra_configs.max_sequence_length=256",
        fmt="overrides",
    ),
]
