"""Profiler.

Verl-omni's profiler config has no NPU or precision-debugger tool blocks (verl-omni 173611f9, legacy_surface.md §3.4
row 41; the release that first shipped it is unverified).
"""

from verl_migrate.kinds import Drop
from verl_migrate.rule_base import register
from verl_migrate.rules._targets import ARR

register(
    Drop(
        id="drop-profiler-npu-and-debugger-tools",
        since="0.2.0",
        summary="`profiler.tool_config.{npu,precision_debugger}` of actor, ref and rollout are gone.",
        refs=(41,),
        paths=tuple(
            f"{ARR}.{role}.profiler.tool_config.{tool}"
            for role in ("actor", "ref", "rollout")
            for tool in ("npu", "precision_debugger")
        ),
        note="verl-omni's profiler supports nsys, torch and torch_memory only",
    )
)
