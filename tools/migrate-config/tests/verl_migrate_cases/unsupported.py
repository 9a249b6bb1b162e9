import dataclasses

from verl_migrate_cases import noop, rewrite


def _project(case):
    return dataclasses.replace(case, target="project")


CASES = [
    # a moved key that upstream verl-omni has and this project's config lacks: removed (reported when switched on)
    _project(
        rewrite(
            "target-unsupported",
            """
            actor_rollout_ref:
              rollout:
                n: 4
                tensor_model_parallel_size: 1
                layered_summon: false
              model:
                pipeline:
                  height: ${oc.select:actor_rollout_ref.rollout.pipeline.height,512}
            """,
            """
            actor_rollout_ref:
              rollout:
                n: 4
            """,
        )
    ),
    _project(noop("target-unsupported", "actor_rollout_ref.rollout.n=4\nmy_team.knob=1", fmt="overrides")),
    _project(
        rewrite(
            "target-default-only",
            "reward.reward_model.enable=True\nreward.reward_model.model_path=/m\ndata.use_shm=false",
            "reward.reward_model.model_path=/m\ndata.use_shm=false",
            fmt="overrides",
        )
    ),
    _project(noop("target-default-only", "reward.reward_model.enable=false\ntrainer.use_v1=$USE_V1", fmt="overrides")),
]
