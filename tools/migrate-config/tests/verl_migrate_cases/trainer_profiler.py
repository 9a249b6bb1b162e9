from verl_migrate_cases import noop, rewrite

CASES = [
    rewrite(
        "drop-critic",
        """
        data:
          train_batch_size: 32
        critic:
          strategy: fsdp
          optim:
            lr: 1e-05
        trainer:
          nnodes: 1
        """,
        """
        data:
          train_batch_size: 32
        trainer:
          nnodes: 1
        """,
    ),
    noop("drop-critic", "trainer.nnodes=1", fmt="overrides"),
    rewrite(
        "drop-trainer-critic-keys",
        """
        trainer.balance_batch=true
        trainer.critic_warmup=0
        trainer.total_epochs=15
        """,
        "trainer.total_epochs=15",
        fmt="overrides",
    ),
    noop("drop-trainer-critic-keys", "trainer.total_epochs=15", fmt="overrides"),
    rewrite(
        "drop-profiler-npu-and-debugger-tools",
        """
        actor_rollout_ref:
          actor:
            profiler:
              tool_config:
                npu:
                  level: level0
                torch:
                  discrete: false
        """,
        """
        actor_rollout_ref:
          actor:
            profiler:
              tool_config:
                torch:
                  discrete: false
        """,
    ),
    noop(
        "drop-profiler-npu-and-debugger-tools",
        "actor_rollout_ref.actor.profiler.tool_config.torch.discrete=true",
        fmt="overrides",
    ),
]
