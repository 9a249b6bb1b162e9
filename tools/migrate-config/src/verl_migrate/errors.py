"""Errors raised by verl-migrate-config; each one names the file, the position and the way out. And its exit codes."""

from __future__ import annotations

#: Exit codes of `verl-migrate-config` (re-exported by `verl_migrate.cli`, which documents them): nothing to do or
#: done; `--check` found a file that would change or `--validate` found errors; an input error (`MigrationError`).
EXIT_OK, EXIT_CHANGED, EXIT_INPUT = 0, 1, 2


class MigrationError(Exception):
    """An input the tool refuses (exit code 2). The message is complete and user facing."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None, column: int | None = None):
        """Store the message and where it happened (1-based line and column, if known)."""
        self.path = path
        self.line = line
        self.column = column
        self.message = message
        super().__init__(self.location() + message)

    def location(self) -> str:
        """Return `file:line:column: ` (parts that are known) or an empty string."""
        if self.path is None:
            return ""
        parts = [self.path]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts) + ": "


class ConflictError(MigrationError):
    """An old key and the new key it maps to are both present with different values."""


class NotAMappingError(MigrationError):
    """The YAML document's top level is a list or a scalar, not a config mapping."""
