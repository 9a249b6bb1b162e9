"""Old registry names (`flow_grpo`, `vllm_omni`, `diffusion_single_turn_agent`, `visual`, `diffusion_model`).

Without upstream verl these objects stand in for verl's registry functions at the old import paths, knowing only
the diffusion names. With upstream verl, `register_upstream(module)` adds the names to verl's own registries
when the registry module is imported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any, ClassVar

from verl_compat._serve import INSTALL_HINT

logger = logging.getLogger(__name__)

AGENT_LOOP_TARGET = "verl_omni.rollout.agent_loop.DiffusionAgentLoop"
VLLM_OMNI_SERVER = "verl_omni.rollout.vllm_omni.server.vLLMOmniHttpServer"


def _unknown(kind: str, name: Any, known: str) -> KeyError:
    return KeyError(f"{kind} {name!r}: verl-compat knows only {known}; {INSTALL_HINT}")


def get_policy_loss_fn(name: str) -> Any:
    """`flow_grpo` -> the old-signature FlowGRPO policy loss."""
    if name != "flow_grpo":
        raise _unknown("policy loss", name, "'flow_grpo'")
    from verl_compat.adapters import compute_policy_loss_flow_grpo

    return compute_policy_loss_flow_grpo


def get_adv_estimator_fn(name: Any) -> Any:
    """`flow_grpo` (or the old enum member) -> the old-signature FlowGRPO outcome advantage."""
    if getattr(name, "value", name) != "flow_grpo":
        raise _unknown("advantage estimator", name, "'flow_grpo'")
    from verl_compat.adapters import compute_flow_grpo_outcome_advantage

    return compute_flow_grpo_outcome_advantage


def get_reward_manager_cls(name: str) -> type:
    """`visual` (and verl-omni's own names) -> verl-omni's reward manager class."""
    from verl_omni.reward import get_reward_manager_class

    return get_reward_manager_class(name)


class _AgentLoopRegistry(Mapping):
    """Read-only stand-in of verl's `_agent_loop_registry`: `diffusion_single_turn_agent` -> `{"_target_": ...}`."""

    _ITEMS: ClassVar[dict[str, dict[str, str]]] = {"diffusion_single_turn_agent": {"_target_": AGENT_LOOP_TARGET}}

    def __getitem__(self, key: str) -> dict[str, str]:
        if key not in self._ITEMS:
            raise _unknown("agent loop", key, "'diffusion_single_turn_agent'")
        return dict(self._ITEMS[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._ITEMS)

    def __len__(self) -> int:
        return len(self._ITEMS)


agent_loop_registry = _AgentLoopRegistry()


def get_rollout_replica_class(name: str) -> type:
    """`vllm_omni` -> verl-omni's vLLM-Omni server class (launched by verl-core's `RolloutReplica`)."""
    if name != "vllm_omni":
        raise _unknown("rollout", name, "'vllm_omni'")
    from verl_core.rollout.registry import get_backend

    return get_backend("vllm_omni")


def get_rollout_class(rollout_name: str, mode: str = "async") -> type:
    """`("vllm_omni", "async")` -> verl-omni's vLLM-Omni server class."""
    if mode != "async":
        raise _unknown("rollout mode", mode, "'async'")
    return get_rollout_replica_class(rollout_name)


class RolloutReplicaRegistry:
    """Stand-in of verl's `RolloutReplicaRegistry` knowing `vllm_omni`."""

    @classmethod
    def get(cls, name: str) -> type:
        """The class registered as `name`."""
        return get_rollout_replica_class(name)


class EngineRegistry:
    """Stand-in of verl's `EngineRegistry` knowing model type `diffusion_model`."""

    @classmethod
    def get_engine_cls(cls, model_type: str, backend: str = "fsdp", device: str | None = None) -> type:
        """`diffusion_model` with backend `fsdp`/`fsdp2` -> `verl_omni.engine.DiffusersFSDPEngine`."""
        if model_type != "diffusion_model" or backend not in ("fsdp", "fsdp2"):
            raise _unknown("engine", (model_type, backend), "('diffusion_model', 'fsdp'|'fsdp2')")
        from verl_omni.engine import DiffusersFSDPEngine

        return DiffusersFSDPEngine


def register_upstream(module: ModuleType) -> None:
    """Add the old diffusion names to upstream verl's registry in `module` (if it is one); never raises."""
    hook = _HOOKS.get(module.__name__)
    if hook is None:
        return
    try:
        hook(module)
    except Exception as e:  # an upstream API we do not know: the names just stay unregistered
        logger.warning("verl-compat: could not register the old names in %s: %s", module.__name__, e)


def _core_algos(m: ModuleType) -> None:
    from verl_compat.adapters import compute_flow_grpo_outcome_advantage, compute_policy_loss_flow_grpo

    if "flow_grpo" not in m.POLICY_LOSS_REGISTRY:
        m.register_policy_loss("flow_grpo")(compute_policy_loss_flow_grpo)
    if "flow_grpo" not in m.ADV_ESTIMATOR_REGISTRY:
        m.register_adv_est("flow_grpo")(compute_flow_grpo_outcome_advantage)


def _agent_loop(m: ModuleType) -> None:
    m._agent_loop_registry.setdefault("diffusion_single_turn_agent", {"_target_": AGENT_LOOP_TARGET})


def _rollout_base(m: ModuleType) -> None:
    m._ROLLOUT_REGISTRY.setdefault(("vllm_omni", "async"), VLLM_OMNI_SERVER)


def _replica(m: ModuleType) -> None:
    m.RolloutReplicaRegistry.register("vllm_omni", lambda: get_rollout_replica_class("vllm_omni"))


def _reward_manager(m: ModuleType) -> None:
    from verl_omni.reward import VisualRewardManager

    m.register("visual")(VisualRewardManager)


_HOOKS = {
    "verl.trainer.ppo.core_algos": _core_algos,
    "verl.experimental.agent_loop.agent_loop": _agent_loop,
    "verl.workers.rollout.base": _rollout_base,
    "verl.workers.rollout.replica": _replica,
    "verl.experimental.reward_loop.reward_manager": _reward_manager,
}
