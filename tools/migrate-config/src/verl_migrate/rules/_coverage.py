"""Rows of legacy_surface.md §3.4 (the 41 rename/move rules) that need no rewrite, with the reason.

Every other row is implemented by at least one rule (its `refs`); the docs generator and a test check this.
"""

UNCHANGED_ROWS = {
    34: "`algorithm.rollout_correction.*`: the same 7 keys and defaults exist in verl-omni; nothing to rewrite "
    "(verl-omni adds `_target_` and mirrors them to `actor.rollout_correction.*` by interpolation)",
}
ROW_COUNT = 41
