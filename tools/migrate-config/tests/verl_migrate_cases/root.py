from verl_migrate.keys import head_defaults
from verl_migrate.target import root_keys
from verl_migrate.upstream import pinned
from verl_migrate_cases import noop, rewrite


def _root_text(skip: tuple[str, ...]) -> str:
    """A legacy root config defining every root key of the target except `skip` (input only, built from data)."""
    lines = [
        "defaults:",
        "  - model_engine: dp",
        "  - diffusion/actor@actor_rollout_ref.actor: ${diffusion/model_engine}_actor",
        "  - _self_",
    ]
    tree: dict = {}
    for key in root_keys():
        if key in skip:
            continue
        node = tree
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = head_defaults()[key]

    def emit(node: dict, ind: int) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                lines.append(" " * ind + f"{k}:")
                emit(v, ind + 2)
            else:
                lines.append(" " * ind + f"{k}: {v}")

    emit(tree, 0)
    return "\n".join(lines) + "\n"


with pinned():  # the case tables are built at import; the rule tests run against upstream's root (conftest.py)
    _BEFORE = _root_text(("algorithm.trainer_type", "algorithm.sample_source"))
# the two keys the target's entry point reads, written by hand after the last key of `algorithm:`
_AFTER = _BEFORE.replace(
    "    rollout_rs_threshold: null\n",
    "    rollout_rs_threshold: null\n  trainer_type: policy_gradient\n  sample_source: online\n",
    1,
)

CASES = [
    rewrite("root-keys-complete", _BEFORE, _AFTER),
    noop(
        "root-keys-complete",
        """
        defaults:
          - diffusion_trainer
          - _self_
        algorithm:
          adv_estimator: flow_grpo
        """,
    ),
    rewrite(
        "root-defaults-complete",
        """
        defaults:
          - diffusion/model_engine: dp_diffusion
          - diffusion/actor@actor_rollout_ref.actor: ${diffusion/model_engine}_actor
          - data@data: legacy_data
          - diffusion/ref@actor_rollout_ref.ref: ${diffusion/model_engine}_ref
          - diffusion/rollout@actor_rollout_ref.rollout: diffusion_rollout
          - diffusion/model@actor_rollout_ref.model: diffusion_model
          - reward@reward: reward
          - _self_
        algorithm:
          _target_: verl.trainer.config.DiffusionAlgoConfig
        """,
        """
        defaults:
          - diffusion/model_engine: dp_diffusion
          - diffusion/actor@actor_rollout_ref.actor: ${diffusion/model_engine}_actor
          - data@data: legacy_data
          - diffusion/ref@actor_rollout_ref.ref: ${diffusion/model_engine}_ref
          - diffusion/rollout@actor_rollout_ref.rollout: diffusion_rollout
          - diffusion/model@actor_rollout_ref.model: diffusion_model
          - reward@reward: reward
          - diffusion/distillation@distillation: diffusion_distillation
          - _self_
        algorithm:
          _target_: verl.trainer.config.DiffusionAlgoConfig
        """,
    ),
    noop(
        "root-defaults-complete",
        """
        defaults:
          - diffusion_trainer
          - override diffusion/rollout@actor_rollout_ref.rollout: diffusion_rollout
          - _self_
        algorithm:
          _target_: verl.trainer.config.DiffusionAlgoConfig
        """,
    ),
    rewrite(
        "group-file-defaults",
        """
        # @package actor_rollout_ref.rollout
        defaults:
          # the LLM rollout config
          - rollout
          - _self_
        """,
        """
        # @package actor_rollout_ref.rollout
        defaults:
          - _self_
        """,
    ),
    noop(
        "group-file-defaults",
        """
        # @package actor_rollout_ref.rollout
        defaults:
          - diffusion_rollout
          - _self_
        """,
    ),
]
