"""A typed proxy over the Ray ranks of one worker role: the trainer calls methods, never method names as strings.

A role is a `Protocol` (e.g. `verl_omni.trainer.actor_group.ActorWorkerAPI`); its proxy is a `RankGroup` subclass
whose attributes are `EveryRank(Protocol.method)` (same arguments on every rank) or `SplitRanks(Protocol.method)`
(each rank gets its contiguous share of a batch). A type checker sees `group.method` as
`Callable[<the Protocol's parameters>, list[<its return type>]]`, so a typo or a wrong arity in the trainer is a
type error. At construction the proxy checks the worker class against the Protocol (`check_worker`): a missing
method or an incompatible signature fails at start-up, naming the role and the method, not on a worker mid-run.
"""

from __future__ import annotations

import copy
import inspect
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from tensordict import TensorDict

__all__ = [
    "EveryRank",
    "RankGroup",
    "SplitRanks",
    "WorkerError",
    "WorkerInterfaceError",
    "check_worker",
    "describe_actor_death",
    "describe_remote_error",
]

P = ParamSpec("P")
R = TypeVar("R")


class WorkerError(RuntimeError):
    """A worker died, hung or failed; the message names the role, the rank, its node and the call."""


class WorkerInterfaceError(TypeError):
    """A worker class does not implement its role's `Protocol`; the message names the role, class and method."""


def protocol_methods(protocol: type) -> dict[str, Callable[..., Any]]:
    """The public methods `protocol` declares (its own and its bases', not `object`'s or `Protocol`'s)."""
    methods: dict[str, Callable[..., Any]] = {}
    for base in reversed(protocol.__mro__):
        if base is object or base.__module__ == "typing":
            continue
        for name, value in vars(base).items():
            if not name.startswith("_") and inspect.isfunction(value):
                methods[name] = value
    return methods


def check_worker(role: str, protocol: type, worker_cls: type) -> None:
    """Check that `worker_cls` implements every method of `protocol` with a compatible signature.

    Compatible: every call the Protocol's signature allows binds to the worker's (`inspect.Signature.bind`), once
    with all parameters (positional ones by position, then by name) and once with the required ones only; the
    worker may add parameters only with defaults. Annotations are not compared (the type checker does that).

    Raises:
        WorkerInterfaceError: names the role, the class and each missing or incompatible method.
    """
    problems = []
    for name, declared in protocol_methods(protocol).items():
        impl = getattr(worker_cls, name, None)
        if impl is None or not callable(impl):
            problems.append(f"{name}: missing (the {protocol.__name__} Protocol declares {name}{_params(declared)})")
            continue
        why = _incompatible(inspect.signature(declared), inspect.signature(impl))
        if why:
            expected = f"{protocol.__name__}.{name}{_params(declared)}"
            problems.append(f"{name}: {worker_cls.__name__}.{name}{_params(impl)} {why} of {expected}")
    if problems:
        raise WorkerInterfaceError(
            f"{role} worker class {worker_cls.__qualname__} does not implement {protocol.__name__}: "
            + "; ".join(problems)
        )


def _params(fn: Callable[..., Any]) -> str:
    return str(inspect.signature(fn)).split(" ->")[0]


def _incompatible(declared: inspect.Signature, impl: inspect.Signature) -> str | None:
    """Why a call valid for `declared` (unbound, with `self`) would not bind to `impl`; None when every one does."""
    params = list(declared.parameters.values())[1:]  # self
    impl_params = list(impl.parameters.values())[1:]
    impl = impl.replace(parameters=impl_params)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keyword = {p.name: None for p in params if p.kind == p.KEYWORD_ONLY}
    by_name = {p.name: None for p in positional if p.kind == p.POSITIONAL_OR_KEYWORD}
    calls = {
        "cannot take every argument": ([None] * len(positional), keyword),
        "cannot take the arguments by name": (
            [None] * sum(p.kind == p.POSITIONAL_ONLY for p in positional),
            {**by_name, **keyword},
        ),
        "requires arguments that are optional": (
            [None] * sum(p.default is p.empty for p in positional),
            {p.name: None for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty},
        ),
    }
    if any(p.kind == p.VAR_POSITIONAL for p in params) and not any(p.kind == p.VAR_POSITIONAL for p in impl_params):
        return "takes no *args, unlike the signature"
    if any(p.kind == p.VAR_KEYWORD for p in params) and not any(p.kind == p.VAR_KEYWORD for p in impl_params):
        return "takes no **kwargs, unlike the signature"
    for why, (args, kwargs) in calls.items():
        try:
            impl.bind(*args, **kwargs)
        except TypeError:
            return why
    return None


class RankGroup:
    """The driver's handle on every rank of one role: fans calls out, gathers results in rank order, names a failure.

    Subclasses set `role` and `protocol` and declare the callable methods as `EveryRank` / `SplitRanks` attributes.

    Args:
        worker_cls (`type`): the class the ranks run; checked against `protocol` here (`check_worker`).
        handles (`list`): Ray actor handles, rank order.
        nodes (`list[dict]`): each rank's `{"ip", "pid"}` (for messages; may be filled later).
        timeout_s (`float`): bound of every call.
        timeout_key (`str`): the config key named when a call runs out of time.
    """

    role: str = "worker"
    protocol: type = object
    drop_keys: tuple[str, ...] = ()  # batch keys `SplitRanks` leaves out of the shares

    def __init__(
        self,
        worker_cls: type,
        handles: list[Any],
        nodes: list[dict[str, Any]],
        timeout_s: float,
        timeout_key: str = "trainer.worker_timeout_s",
    ) -> None:
        check_worker(self.role, self.protocol, worker_cls)
        self.worker_cls = worker_cls
        self.handles, self.nodes, self.timeout_s, self.timeout_key = handles, nodes, timeout_s, timeout_key

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return len(self.handles)

    def within(self, timeout_s: float, timeout_key: str) -> Self:
        """This group with calls bounded by `timeout_s` instead (`timeout_key` named when it runs out)."""
        bounded = copy.copy(self)
        bounded.timeout_s, bounded.timeout_key = timeout_s, timeout_key
        return bounded

    def split(self, batch: TensorDict) -> list[TensorDict]:
        """Contiguous, equal shares of `batch` (`drop_keys` left out), one per rank."""
        batch = batch.exclude(*self.drop_keys)
        size = batch.batch_size[0]
        if size % self.world_size:
            raise ValueError(f"batch of {size} samples does not split over {self.world_size} {self.role} ranks")
        share = size // self.world_size
        return [batch[r * share : (r + 1) * share] for r in range(self.world_size)]

    def call_ranks(self, method: str, per_rank: Sequence[tuple[tuple, dict]]) -> list[Any]:
        """Call `method(*args_r, **kwargs_r)` on each rank `r`; results in rank order (use the typed attributes).

        Raises:
            WorkerError: a rank died, raised, or did not answer within `timeout_s` (names the rank and node).
        """
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        refs = [getattr(h, method).remote(*a, **k) for h, (a, k) in zip(self.handles, per_rank, strict=True)]
        deadline = time.monotonic() + self.timeout_s
        pending = list(refs)
        while pending:  # wait for all, but fail at the first rank that dies or raises
            left = deadline - time.monotonic()
            # short waits keep Ctrl-C working (a signal is handled between them)
            done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, min(left, 1.0)))
            if not done and left > 1.0:
                continue
            if not done:
                late = [self._who(refs.index(p)) for p in pending]
                raise WorkerError(
                    f"{self.role} worker {', '.join(late)} did not finish {method} within {self.timeout_s:g} s "
                    f"({self.timeout_key}); it is hung or too slow"
                )
            rank = refs.index(done[0])
            try:
                ray.get(done[0])
            except RayActorError as e:
                raise WorkerError(
                    f"{self.role} worker {self._who(rank)} died during {method}: {describe_remote_error(e)}"
                ) from e
            except RayTaskError as e:
                raise WorkerError(
                    f"{self.role} worker {self._who(rank)} failed in {method}: {describe_remote_error(e)}"
                ) from e
        try:
            return ray.get(refs, timeout=1.0)
        except GetTimeoutError as e:  # pragma: no cover - all refs are done here
            raise WorkerError(f"{self.role} workers: results of {method} unavailable") from e

    def _who(self, rank: int) -> str:
        node = self.nodes[rank] if rank < len(self.nodes) else {}
        return f"rank {rank} (node {node.get('ip', '?')}, pid {node.get('pid', '?')})"


class EveryRank(Generic[P, R]):
    """`group.name(*args, **kwargs) -> list[R]`: the Protocol method `method` on every rank with the same arguments."""

    def __init__(self, method: Callable[Concatenate[Any, P], R]) -> None:
        self.method, self.name = method, method.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        _check_name(owner, name, self.name)

    @overload
    def __get__(self, group: None, owner: type | None = None) -> EveryRank[P, R]: ...
    @overload
    def __get__(self, group: RankGroup, owner: type | None = None) -> Callable[P, list[R]]: ...
    def __get__(self, group: RankGroup | None, owner: type | None = None) -> Any:
        if group is None:
            return self

        def on_every_rank(*args: P.args, **kwargs: P.kwargs) -> list[R]:
            return group.call_ranks(self.name, [(args, kwargs)] * group.world_size)

        on_every_rank.__name__ = on_every_rank.__qualname__ = self.name
        return on_every_rank


class SplitRanks(Generic[R]):
    """`group.name(batch) -> list[R]`: the Protocol method `method` on each rank with its share of `batch`."""

    def __init__(self, method: Callable[[Any, TensorDict], R]) -> None:
        self.method, self.name = method, method.__name__

    def __set_name__(self, owner: type, name: str) -> None:
        _check_name(owner, name, self.name)

    @overload
    def __get__(self, group: None, owner: type | None = None) -> SplitRanks[R]: ...
    @overload
    def __get__(self, group: RankGroup, owner: type | None = None) -> Callable[[TensorDict], list[R]]: ...
    def __get__(self, group: RankGroup | None, owner: type | None = None) -> Any:
        if group is None:
            return self

        def on_shares(batch: TensorDict) -> list[R]:
            return group.call_ranks(self.name, [((share,), {}) for share in group.split(batch)])

        on_shares.__name__ = on_shares.__qualname__ = self.name
        return on_shares


def _check_name(owner: type, attribute: str, method: str) -> None:
    """The proxy attribute must carry the Protocol method's own name (the trainer reads one name for one call)."""
    if attribute != method:
        raise TypeError(f"{owner.__name__}.{attribute} proxies the worker method {method!r}: name it {method}")


#: frames of the remote traceback that say nothing about the caller's code: torch (with inductor's generated code and
#: triton), Ray, and the interpreter's frozen modules
_INTERNAL_FRAME = re.compile(r"[/\\](?:torch|ray|triton|torchinductor_[^/\\]*)[/\\]|^<frozen ")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')


def describe_remote_error(error: BaseException, limit: int = 300) -> str:
    """One line saying what a Ray worker raised, for a `WorkerError` message.

    For a `RayTaskError` (the worker's method raised): `Type: first line of its message` of the original exception
    (`.cause`, unwrapped through nested task errors), the line cut at `limit` characters, then
    `(at file:line in function)` for the innermost frame of the remote traceback outside torch and Ray, when there
    is one. For a `RayActorError` (the worker died): `describe_actor_death`. For any other error the first and last
    non-empty lines of its message.
    """
    from ray.exceptions import RayActorError, RayTaskError

    if isinstance(error, RayActorError):
        return describe_actor_death(error)
    if not isinstance(error, RayTaskError):
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        if len(lines) > 2:
            return _cut(f"{lines[0]} ... {lines[-1]}", limit)
        return _cut(" ".join(lines), limit) or type(error).__name__
    remote_traceback = str(error)
    cause: BaseException = error
    for _ in range(8):  # a worker's own call to another Ray actor nests a task error in the cause
        inner = getattr(cause, "cause", None)
        if not isinstance(cause, RayTaskError) or not isinstance(inner, BaseException) or inner is cause:
            break
        cause = inner
    first = next((line.strip() for line in str(cause).splitlines() if line.strip()), "")
    text = _cut(f"{type(cause).__name__}: {first}" if first else type(cause).__name__, limit)
    frame = _innermost_own_frame(remote_traceback)
    return f"{text} (at {frame})" if frame else text


#: a `key: value` line of the actor's identity in Ray's death message (`\tclass_name: W`, `\tpid: 7`)
_ACTOR_FIELD = re.compile(r"^\s+(?P<key>\w+): (?P<value>.*)$")
#: where Ray's generic advice starts in a death message (what follows names no fact of this death)
_RAY_ADVICE = "Some common causes include:"


def describe_actor_death(error: BaseException, limit: int = 600) -> str:
    """One line saying why a Ray actor died: `Type (actor class C): <Ray's headline> <Ray's reason>`.

    The reason is everything Ray says after the actor's identity fields (the exit type and detail: an exit code, a
    signal, the OOM killer, `ray.kill`), kept whole up to Ray's generic list of common causes, which becomes one short
    clause; the line is cut at `limit` characters.
    """
    lines = [line.rstrip() for line in str(error).splitlines() if line.strip()]
    fields = {m["key"]: m["value"].strip() for line in lines[1:] if (m := _ACTOR_FIELD.match(line))}
    reason = " ".join(line.strip() for line in lines[1:] if not _ACTOR_FIELD.match(line))
    advice = _RAY_ADVICE in reason
    reason = reason.partition(_RAY_ADVICE)[0].strip()
    head = (
        f"{type(error).__name__} (actor class {fields['class_name']})"
        if "class_name" in fields
        else type(error).__name__
    )
    text = " ".join(part for part in (lines[0].strip() if lines else "", reason) if part)
    if advice:
        text += " (Ray's usual causes: the kernel's OOM killer, `ray stop --force`, a crash such as SIGSEGV)"
    return _cut(f"{head}: {text}" if text else head, limit)


def _innermost_own_frame(traceback_text: str) -> str | None:
    """`file:line in function` of the last traceback frame outside torch and Ray (paths from `site-packages/`)."""
    found = None
    for line in traceback_text.splitlines():
        match = _FRAME.match(line)
        if match and not _INTERNAL_FRAME.search(match["file"]):
            path = match["file"].rpartition("site-packages/")[2]
            found = f"{path}:{match['line']} in {match['func']}"
    return found


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."
