"""The rule kinds: the classes that `verl_migrate.rules` declares its rules with; each subclasses `Rule`.

- `kinds.keys`: key and value rewrites (RenameKey, MoveSubtree, SplitDict, RenameValue, ReplaceTarget, Drop, Flag,
  SetExplicitDefault, RewriteDefaultsEntry, FixPlusPrefix, ReplaceEntryPoint), re-exported here;
- `kinds.target`: kinds that fit a document to what the target implements (FitTarget, FollowTargetClasses,
  ScalarToList), reading `verl_migrate.target` (what the target config looks like, not a rule);
- `kinds.hydra`: Hydra's own settings (`hydra.*`);
- `kinds.completion`: completing a root config and config-group files against the target's groups.
"""

from verl_migrate.kinds.keys import (
    Drop,
    FixPlusPrefix,
    Flag,
    MoveSubtree,
    RenameKey,
    RenameValue,
    ReplaceEntryPoint,
    ReplaceTarget,
    RewriteDefaultsEntry,
    SetExplicitDefault,
    SplitDict,
)

__all__ = [
    "Drop",
    "FixPlusPrefix",
    "Flag",
    "MoveSubtree",
    "RenameKey",
    "RenameValue",
    "ReplaceEntryPoint",
    "ReplaceTarget",
    "RewriteDefaultsEntry",
    "SetExplicitDefault",
    "SplitDict",
]
