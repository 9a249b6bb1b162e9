from verl_migrate_cases import flagged, noop, rewrite

CASES = [
    rewrite(
        "reward-manager-visual",
        """
        reward:
          reward_manager:
            _target_: verl.workers.config.reward_model.RewardManagerConfig
            source: register
            name: visual
            module:
              _target_: verl.trainer.config.config.ModuleConfig
              path: null
        """,
        """
        reward:
          reward_manager:
            _target_: verl.workers.config.reward_model.RewardManagerConfig
            source: importlib
            name: VisualRewardManager
            module:
              _target_: verl.trainer.config.config.ModuleConfig
              path: pkg://verl_omni.reward_loop.reward_manager
        """,
    ),
    noop("reward-manager-visual", "reward.reward_manager.name=VisualRewardManager", fmt="overrides"),
    rewrite(
        "drop-reward-manager-module-name",
        """
        reward:
          reward_manager:
            module:
              path: null
              name: custom_reward_manager
        """,
        """
        reward:
          reward_manager:
            module:
              path: null
        """,
    ),
    noop("drop-reward-manager-module-name", "reward.reward_manager.module.path=pkg://my.mgr", fmt="overrides"),
    flagged("reward-manager-naive", "reward.reward_manager.name=naive"),
    noop("reward-manager-naive", "reward.reward_manager.name=VisualRewardManager", fmt="overrides"),
    flagged("reward-fn-example-path", "reward.custom_reward_function.path=examples/flowgrpo_trainer/reward_fn.py"),
    noop("reward-fn-example-path", "reward.custom_reward_function.path=my_reward.py", fmt="overrides"),
]
