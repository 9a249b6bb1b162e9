from verl_migrate_cases import noop, rewrite

CASES = [
    rewrite(
        "entry-point-main-diffusion",
        """
        #!/bin/bash
        HYDRA_FULL_ERROR=1 python3 -m verl.trainer.main_flowgrpo \\
            trainer.nnodes=1 $@
        """,
        """
        #!/bin/bash
        HYDRA_FULL_ERROR=1 python3 -m verl_omni.trainer.main_diffusion \\
            trainer.nnodes=1 $@
        """,
        fmt="script",
    ),
    noop(
        "entry-point-main-diffusion",
        """
        #!/bin/bash
        # python3 -m verl.trainer.main_flowgrpo is the old way
        python3 -m verl_omni.trainer.main_diffusion trainer.nnodes=1 "$@"
        """,
        fmt="script",
    ),
    rewrite(
        "hydra-plus-prefix",
        """
        actor_rollout_ref.rollout.val_kwargs.seed=7
        +trainer.total_epochs=3
        """,
        """
        +actor_rollout_ref.rollout.val_kwargs.seed=7
        trainer.total_epochs=3
        """,
        fmt="overrides",
    ),
    noop("hydra-plus-prefix", "+actor_rollout_ref.rollout.val_kwargs.seed=7", fmt="overrides"),
]
