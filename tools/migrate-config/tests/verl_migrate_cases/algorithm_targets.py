from verl_migrate_cases import noop, rewrite

_TARGETS = [
    (
        "target-actor-config",
        "actor",
        "verl.workers.config.FSDPActorConfig",
        "verl_omni.workers.config.diffusion.FSDPDiffusionActorConfig",
    ),
    (
        "target-ref-config",
        "ref",
        "verl.workers.config.FSDPActorConfig",
        "verl_omni.workers.config.diffusion.FSDPDiffusionActorConfig",
    ),
    (
        "target-rollout-config",
        "rollout",
        "verl.workers.config.DiffusionRolloutConfig",
        "verl_omni.workers.config.diffusion.DiffusionRolloutConfig",
    ),
    (
        "target-model-config",
        "model",
        "verl.workers.config.DiffusionModelConfig",
        "verl_omni.workers.config.diffusion.DiffusionModelConfig",
    ),
]

CASES = [
    rewrite(
        "adv-estimator-to-model-algorithm",
        """
        algorithm:
          adv_estimator: flow_grpo
          global_std: true
        """,
        """
        algorithm:
          global_std: true
        actor_rollout_ref:
          model:
            algorithm: flow_grpo
        """,
    ),
    noop("adv-estimator-to-model-algorithm", "actor_rollout_ref.model.algorithm=flow_grpo", fmt="overrides"),
    rewrite(
        "target-val-kwargs-config",
        """
        actor_rollout_ref:
          rollout:
            val_kwargs:
              _target_: 'verl.workers.config.DiffusionSamplingConfig'
        """,
        """
        actor_rollout_ref:
          rollout:
            val_kwargs:
              _target_: 'verl_omni.workers.config.diffusion.DiffusionSamplingConfig'
        """,
    ),
    noop(
        "target-val-kwargs-config",
        """
        actor_rollout_ref:
          rollout:
            val_kwargs:
              _target_: verl_omni.workers.config.diffusion.DiffusionSamplingConfig
        """,
    ),
    rewrite(
        "target-algorithm-config",
        "algorithm:\n  _target_: verl.trainer.config.DiffusionAlgoConfig\n",
        "algorithm:\n  _target_: verl_omni.trainer.config.DiffusionAlgoConfig\n",
    ),
    noop("target-algorithm-config", "algorithm:\n  _target_: verl_omni.trainer.config.DiffusionAlgoConfig\n"),
    rewrite(
        "worker-extension-class-path",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.worker_extension_cls=verl.workers.rollout.vllm_rollout.utils.vLLMOmniColocateWorkerExtension",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.worker_extension_cls=verl_omni.workers.rollout.vllm_rollout.utils.vLLMOmniColocateWorkerExtension",
        fmt="overrides",
    ),
    noop(
        "worker-extension-class-path",
        "+actor_rollout_ref.rollout.engine_kwargs.vllm_omni.worker_extension_cls=my.Ext",
        fmt="overrides",
    ),
]

for _id, _node, _old, _new in _TARGETS:
    CASES.append(
        rewrite(
            _id,
            f"actor_rollout_ref:\n  {_node}:\n    _target_: {_old}  # class\n",
            f"actor_rollout_ref:\n  {_node}:\n    _target_: {_new}  # class\n",
        )
    )
    CASES.append(noop(_id, f"actor_rollout_ref:\n  {_node}:\n    _target_: {_new}\n"))
