import dataclasses

from verl_migrate_cases import noop, rewrite


def _project(case):
    return dataclasses.replace(case, target="project")


CASES = [
    # a moved key that upstream verl-omni has and this project's config lacks: removed (reported when switched on)
    _project(
        rewrite(
            "target-unsupported",
            # keys outside the rollout section, whose schema another change may extend
            """
            actor_rollout_ref:
              model:
                lora_rank: 8
                tokenizer_path: /models/tok
                pipeline:
                  height: ${oc.select:actor_rollout_ref.rollout.pipeline.height,512}
            trainer:
              esi_redundant_time: 0
            """,
            """
            actor_rollout_ref:
              model:
                lora_rank: 8
            """,
        )
    ),
    _project(noop("target-unsupported", "actor_rollout_ref.rollout.n=4\nmy_team.knob=1", fmt="overrides")),
    _project(
        rewrite(
            "target-default-only",
            "trainer.use_v1=True\nreward.reward_model.enable=True\ndata.use_shm=false",
            "reward.reward_model.enable=True\ndata.use_shm=false",
            fmt="overrides",
        )
    ),
    _project(noop("target-default-only", "reward.reward_model.enable=false\ntrainer.use_v1=$USE_V1", fmt="overrides")),
]

CASES += [
    rewrite("trainer-logger-list", "trainer.logger=console", "trainer.logger=[console]", fmt="overrides"),
    rewrite(
        "trainer-logger-list",
        "trainer:\n  # where metrics go\n  logger: console\n",
        "trainer:\n  # where metrics go\n  logger: [console]\n",
    ),
    noop("trainer-logger-list", 'trainer.logger=\'["console", "wandb"]\'\ntrainer.nnodes=1', fmt="overrides"),
    noop("trainer-logger-list", "trainer:\n  logger: ${oc.env:LOGGERS}\n"),
]

CASES += [
    _project(
        rewrite(
            "target-classes-follow",
            """
            actor_rollout_ref:
              actor:
                optim:
                  _target_: verl.workers.config.FSDPOptimizerConfig
                  lr: 1e-5
            """,
            """
            actor_rollout_ref:
              actor:
                optim:
                  _target_: verl_omni.config.OptimConfig
                  lr: 1e-5
            """,
        )
    ),
    _project(noop("target-classes-follow", "actor_rollout_ref:\n  actor:\n    optim:\n      _target_: my.Optim\n")),
]

CASES += [
    _project(
        rewrite(
            "reward-manager-naive-to-visual",
            "reward.reward_manager.name=naive",
            "reward.reward_manager.name=visual",
            fmt="overrides",
        )
    ),
    _project(noop("reward-manager-naive-to-visual", "reward.reward_manager.name=visual", fmt="overrides")),
]
