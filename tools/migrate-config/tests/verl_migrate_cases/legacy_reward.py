from verl_migrate_cases import noop, rewrite

_LEAVES = [
    ("legacy-reward-model-num-workers", "reward_model.num_workers", "reward.num_workers", "4"),
    ("legacy-reward-model-reward-manager", "reward_model.reward_manager", "reward.reward_manager.name", "naive"),
    ("legacy-reward-loop-source", "reward_model.reward_loop_source", "reward.reward_manager.source", "importlib"),
    (
        "legacy-reward-loop-module-path",
        "reward_model.reward_loop_module_path",
        "reward.reward_manager.module.path",
        "pkg://my.mgr",
    ),
    ("legacy-reward-loop-class-name", "reward_model.reward_loop_class_name", "reward.reward_manager.name", "MyMgr"),
    ("legacy-reward-model-enable", "reward_model.enable", "reward.reward_model.enable", "true"),
    (
        "legacy-reward-model-resource-pool",
        "reward_model.enable_resource_pool",
        "reward.reward_model.enable_resource_pool",
        "true",
    ),
    ("legacy-reward-model-gpus", "reward_model.n_gpus_per_node", "reward.reward_model.n_gpus_per_node", "4"),
    ("legacy-reward-model-nnodes", "reward_model.nnodes", "reward.reward_model.nnodes", "1"),
    ("legacy-reward-model-path", "reward_model.model.path", "reward.reward_model.model_path", "/m/qwen3-vl"),
    ("legacy-reward-kwargs", "reward_model.reward_kwargs.max_len", "reward.reward_kwargs.max_len", "8"),
    ("legacy-reward-model-rollout", "reward_model.rollout.name", "reward.reward_model.rollout.name", "vllm"),
    ("legacy-sandbox-fusion", "sandbox_fusion.url", "reward.sandbox_fusion.url", "http://sandbox"),
    ("legacy-custom-reward-function", "custom_reward_function.path", "reward.custom_reward_function.path", "r.py"),
]

CASES = [
    rewrite(
        "legacy-reward-model-enable",
        """
        reward_model:
          enable: true
        reward:
          num_workers: 4
        """,
        """
        reward:
          num_workers: 4
          reward_model:
            enable: true
        """,
    ),
    rewrite(
        "drop-legacy-reward-model-placeholders",
        """
        reward_model:
          model:
            external_lib: null
            trust_remote_code: null
        """,
        "{}\n",
    ),
    noop("drop-legacy-reward-model-placeholders", "reward.reward_model.model_path=/m", fmt="overrides"),
]
for _id, _old, _new, _value in _LEAVES:
    if _id != "legacy-reward-model-enable":
        CASES.append(
            rewrite(
                _id, f"{_old}={_value}", f"{'+' if 'reward_kwargs' in _new else ''}{_new}={_value}", fmt="overrides"
            )
        )
    CASES.append(
        noop(_id, f"{_new}={_value}", fmt="overrides")
        if "reward_kwargs" not in _new
        else noop(_id, f"+{_new}={_value}", fmt="overrides")
    )
