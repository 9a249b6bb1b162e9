"""Config errors that carry the dotted key they are about."""

from __future__ import annotations

__all__ = ["ConfigError", "ConfigKeyError", "ConfigTypeError", "ConfigValueError"]


class ConfigError(ValueError):
    """A config value was rejected; `key` is the dotted path of the offending key.

    Rendered as ``"<owner>.<key>: <body>"`` for a directly built config and as
    ``"<dotted.path>: <body> (in <Owner>)"`` once a builder prefixed the path of the enclosing node.
    """

    def __init__(self, body: str, *, key: str, owner: str | None = None, source: str | None = None):
        self.body = body
        self.key = key
        self.owner = owner
        self.source = source
        self._prefixed = False
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        if self.owner and not self._prefixed:
            return f"{where}{self.owner}.{self.key}: {self.body}"
        suffix = f" (in {self.owner})" if self.owner else ""
        return f"{where}{self.key}: {self.body}{suffix}"

    def with_prefix(self, prefix: str | None, source: str | None = None) -> ConfigError:
        """Return a copy of this error whose key is `prefix.key` (and `source` set when given)."""
        key = f"{prefix}.{self.key}" if prefix else self.key
        new = type(self)(self.body, key=key, owner=self.owner, source=source or self.source)
        new._prefixed = self._prefixed or bool(prefix)
        new.args = (str(new),)
        return new


class ConfigValueError(ConfigError):
    """A value has the right type but is outside what the key allows."""


class ConfigTypeError(ConfigError, TypeError):
    """A value does not match the type annotated on its key."""


class ConfigKeyError(ConfigError, KeyError):
    """A key is not a field of the config it was given to."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return ConfigError.__str__(self)
