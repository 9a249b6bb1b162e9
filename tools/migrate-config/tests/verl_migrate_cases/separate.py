import dataclasses

from verl_migrate_cases import noop, rewrite


def _project(case):
    return dataclasses.replace(case, target="project")


CASES = [
    _project(
        rewrite(
            "v1-separate-async-mode",
            """
            trainer:
              total_epochs: 1
              v1:
                trainer_mode: separate_async
            """,
            """
            trainer:
              total_epochs: 1
              mode: separate
            """,
        )
    ),
    _project(
        rewrite(
            "v1-separate-async-mode",
            "trainer.v1.trainer_mode=separate_async",
            "trainer.mode=separate",
            fmt="overrides",
        )
    ),
    # upstream's default `sync` and its `colocate_async` have no equivalent: left for `target-unsupported`
    _project(noop("v1-separate-async-mode", "trainer.v1.trainer_mode=sync\ntrainer.mode=colocated", fmt="overrides")),
    _project(
        rewrite(
            "v1-parameter-sync-step",
            """
            trainer:
              v1:
                separate_async:
                  parameter_sync_step: 4  # push every 4 steps
            """,
            """
            trainer:
              separate:
                parameter_sync_step: 4  # push every 4 steps
            """,
        )
    ),
    _project(noop("v1-parameter-sync-step", "trainer.separate.parameter_sync_step=2", fmt="overrides")),
    _project(
        rewrite(
            "v1-max-off-policy-threshold",
            "trainer.v1.sampler.max_off_policy_threshold=8",
            "trainer.separate.max_off_policy_threshold=8",
            fmt="overrides",
        )
    ),
    _project(noop("v1-max-off-policy-threshold", "trainer.separate.max_off_policy_threshold=0", fmt="overrides")),
]
