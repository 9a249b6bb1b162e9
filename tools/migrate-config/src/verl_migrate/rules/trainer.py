"""Trainer and critic.

FlowGRPO has no critic; `trainer.{balance_batch,critic_warmup,max_critic_ckpt_to_keep}` are gone (verl-omni REF0,
legacy_surface.md §3.4 row 39).
"""

from verl_migrate.kinds import Drop
from verl_migrate.kinds.target import ScalarToList
from verl_migrate.rule_base import register

register(
    Drop(
        id="drop-critic",
        since="0.1.0",
        summary="The `critic.*` subtree is gone: FlowGRPO trains without a critic.",
        refs=(39,),
        paths=("critic",),
        note="verl-omni's diffusion trainer has no critic",
    )
)

register(
    Drop(
        id="drop-trainer-critic-keys",
        since="0.1.0",
        summary="`trainer.{balance_batch,critic_warmup,max_critic_ckpt_to_keep}` are gone.",
        refs=(39,),
        paths=("trainer.balance_batch", "trainer.critic_warmup", "trainer.max_critic_ckpt_to_keep"),
        note="the diffusion trainer does not read this key",
    )
)

register(
    ScalarToList(
        id="trainer-logger-list",
        since="0.2.0",
        summary="`trainer.logger=console` (one string, which verl accepted) becomes the list `[console]`.",
        path="trainer.logger",
    )
)
