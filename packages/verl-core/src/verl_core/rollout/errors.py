"""Errors of the rollout servers; each carries the HTTP status it maps to and, where known, the field."""

from __future__ import annotations

__all__ = [
    "BadRequestError",
    "BadResponseError",
    "ConflictError",
    "EngineError",
    "EngineTimeoutError",
    "NotReadyError",
    "PayloadTooLargeError",
    "RolloutError",
    "ServerDeadError",
    "UnsupportedError",
    "WeightSyncError",
]


class RolloutError(RuntimeError):
    """Base of rollout server errors; `status_code` is the HTTP status a route answers with."""

    status_code = 500

    def __init__(self, message: str, *, field: str | None = None):
        self.message = message
        self.field = field
        super().__init__(message)

    def to_json(self) -> dict:
        """The JSON error body the HTTP routes return."""
        return {"error": {"type": type(self).__name__, "message": self.message, "field": self.field}}


class BadRequestError(RolloutError, ValueError):
    """The request is malformed or asks for something the backend does not allow (`field` names it)."""

    status_code = 422


class PayloadTooLargeError(RolloutError, ValueError):
    """The request body or a weight bucket is larger than the configured limit."""

    status_code = 413


class ConflictError(RolloutError):
    """The request clashes with server state (a duplicate request id, a weight update already running)."""

    status_code = 409


class WeightSyncError(BadRequestError):
    """A weight sync failed (the one weight-sync error of the project).

    Either a wrong `update_weights` payload (unknown tensor name, wrong shape or dtype, truncated stream; answered with
    422), or, raised by the trainer after a sync, a rollout server that does not serve the weight version or tensors
    the actor pushed (names the server rank); `verl_omni.trainer.flow_grpo_trainer.WeightSyncError` is this class.
    """


class NotReadyError(RolloutError):
    """The server cannot serve this now: not launched, asleep, updating weights, or shut down."""

    status_code = 503


class EngineTimeoutError(RolloutError, TimeoutError):
    """An engine call did not finish within its configured timeout; the engine may be hung."""

    status_code = 504


class EngineError(RolloutError):
    """The engine raised while serving a valid request."""

    status_code = 500


class UnsupportedError(RolloutError):
    """The backend does not serve this route (e.g. `/v1/chat/completions` on a diffusion server)."""

    status_code = 501


class BadResponseError(RolloutError):
    """A server's answer could not be decoded: a malformed or truncated binary body (`field` names the part)."""

    status_code = 502


class ServerDeadError(RolloutError, ConnectionError):
    """A server of a replica cannot be reached; `rank` says which."""

    status_code = 502

    def __init__(self, message: str, *, rank: int):
        self.rank = rank
        super().__init__(message)

    def __reduce__(self) -> tuple:
        # pickled with its rank (Ray carries it from an actor rank that pushed weights to the driver)
        return (_server_dead, (self.message, self.rank), self.__dict__)


def _server_dead(message: str, rank: int) -> ServerDeadError:
    return ServerDeadError(message, rank=rank)
