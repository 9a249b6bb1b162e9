import dataclasses

from verl_migrate_cases import flagged, noop, rewrite


def _project(case):
    return dataclasses.replace(case, target="project")


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
    _project(
        rewrite(
            "reward-fn-ocr-builtin",
            "reward.custom_reward_function.path=examples/flowgrpo_trainer/reward_fn.py\n"
            "reward.custom_reward_function.name=compute_score_ocr",
            "reward.custom_reward_function.path=pkg://verl_omni.reward.ocr\n"
            "reward.custom_reward_function.name=compute_score_ocr",
            fmt="overrides",
        )
    ),
    _project(
        rewrite(
            "reward-fn-ocr-builtin",
            """
            reward:
              custom_reward_function:
                path: verl_omni/utils/reward_score/genrm_ocr.py  # upstream verl-omni's copy
                name: compute_score_ocr
            """,
            """
            reward:
              custom_reward_function:
                path: pkg://verl_omni.reward.ocr  # upstream verl-omni's copy
                name: compute_score_ocr
            """,
        )
    ),
    _project(
        rewrite(
            "drop-reward-model-rollout-name-missing",
            """
            reward:
              reward_model:
                enable: false
                rollout:
                  name: ???
                  dtype: bfloat16
            """,
            """
            reward:
              reward_model:
                enable: false
                rollout:
                  dtype: bfloat16
            """,
        )
    ),
    _project(noop("drop-reward-model-rollout-name-missing", "reward.reward_model.rollout.name=vllm", fmt="overrides")),
    _project(noop("reward-fn-ocr-builtin", "reward.custom_reward_function.path=my_reward.py", fmt="overrides")),
]
