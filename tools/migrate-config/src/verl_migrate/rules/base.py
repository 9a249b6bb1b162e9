"""Former home of `Rule`, the rule phases and the registry: they live in `verl_migrate.rule_base` (re-exported here)."""

from verl_migrate.rule_base import (
    PHASE_DEFAULTS,
    PHASE_DROP,
    PHASE_EXPLICIT,
    PHASE_INPUT_FLAGS,
    PHASE_LEGACY,
    PHASE_MOVE,
    PHASE_PREFIX,
    PHASE_VALUES,
    Rule,
    register,
    registry,
    text_of,
)

__all__ = [
    "PHASE_DEFAULTS",
    "PHASE_DROP",
    "PHASE_EXPLICIT",
    "PHASE_INPUT_FLAGS",
    "PHASE_LEGACY",
    "PHASE_MOVE",
    "PHASE_PREFIX",
    "PHASE_VALUES",
    "Rule",
    "register",
    "registry",
    "text_of",
]
