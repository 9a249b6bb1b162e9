"""Load a user's reward function from `reward.custom_reward_function.{path,name}` and check its signature.

Two forms are accepted, told apart when loading:

- **per sample** (verl's old signature, so pre-#6200 reward files run unchanged):
  `compute_score(data_source, solution_image, ground_truth, extra_info, **kwargs)`, called with keyword
  arguments once per image (`solution_image` a uint8 `(3, H, W)` tensor); `def` or `async def`.
- **batched**: decorated with `@verl_omni.reward.batched_reward`, or declaring a `solution_images` parameter:
  `compute_score(data_sources, solution_images, ground_truths, extra_infos, **kwargs)`, called once per chunk
  with lists and a uint8 `(B, 3, H, W)` tensor; it returns B scores (a list, array or tensor), a list of
  per-sample results, or a dict of B-long lists with a `score` key.

A result is a number or a dict with a `score` key (other keys become extra metrics). `path` is a `.py`
file (relative to the working directory, `~` expanded) or `pkg://dotted.module`; verl-omni's module paths
for the JPEG scorer map to this project's.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["LoadedRewardFunction", "batched_reward", "checks_reward_kwargs", "load_reward_function"]

F = TypeVar("F", bound=Callable[..., Any])

_BATCHED_ATTR = "__verl_batched_reward__"
_CHECK_KWARGS = "check_reward_kwargs"  # a module-level function a reward module may define (see below)
PER_SAMPLE_ARGS = ("data_source", "solution_image", "ground_truth", "extra_info")
BATCHED_ARGS = ("data_sources", "solution_images", "ground_truths", "extra_infos")
_REWARD_MODEL_ARGS = ("reward_router_address", "reward_model_tokenizer", "model_name")  # reward_model.REWARD_MODEL_ARGS

#: verl / verl-omni module paths whose scorers live here under another name
MODULE_ALIASES = {
    "verl_omni.utils.reward_score.jpeg_compressibility": "verl_omni.reward.jpeg",
    "verl.utils.reward_score.jpeg_compressibility": "verl_omni.reward.jpeg",
    "verl_omni.utils.reward_score": "verl_omni.reward.builtin",
    "verl_omni.utils.reward_score.genrm_ocr": "verl_omni.reward.ocr",
}


def batched_reward(fn: F) -> F:
    """Mark `fn` as batched: it is called once per chunk with lists (see the module docstring)."""
    setattr(fn, _BATCHED_ATTR, True)
    return fn


def checks_reward_kwargs(check: F) -> F:
    """Mark a module's `check_reward_kwargs(reward_kwargs)`: called at load time to check the function's kwargs.

    The function must be named `check_reward_kwargs` and live in the reward function's module; it raises
    `ValueError` (or `TypeError`) naming the bad kwarg, and loading re-raises it naming the config key.
    """
    if check.__name__ != _CHECK_KWARGS:
        raise TypeError(f"checks_reward_kwargs: the checker must be named {_CHECK_KWARGS}, got {check.__name__}")
    return check


class LoadedRewardFunction:
    """A user reward function with what the scorer needs to call it.

    Attributes:
        fn: the function.
        name (`str`): `"<name> (<path>)"`, used in messages.
        batched (`bool`): batched form (lists per call) or per sample.
        is_async (`bool`): a coroutine function (awaited; per-sample calls of one chunk run concurrently).
        reward_kwargs (`dict`): extra keyword arguments passed on every call.
        accepts_prompts (`bool`): a batched function declares `prompts` (or `**kwargs`) and gets the prompts.
    """

    def __init__(self, fn: Callable[..., Any], *, name: str, batched: bool, reward_kwargs: Mapping[str, Any]) -> None:
        self.fn = fn
        self.name = name
        self.batched = batched
        self.is_async = inspect.iscoroutinefunction(fn)
        self.reward_kwargs = dict(reward_kwargs)
        params = inspect.signature(fn).parameters
        has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self.accepts_prompts = batched and ("prompts" in params or has_var_kw)


def load_reward_function(
    path: str,
    name: str,
    *,
    reward_kwargs: Mapping[str, Any] | None = None,
    key: str = "reward.custom_reward_function",
    provided: tuple[str, ...] = (),
) -> LoadedRewardFunction:
    """Import `name` from `path` and check that it can be called the way the reward manager calls it.

    Args:
        path (`str`): a `.py` file or `pkg://dotted.module`.
        name (`str`): the function's name in it.
        reward_kwargs (`dict`, *optional*): extra keyword arguments every call will get.
        key (`str`): the config key of this function, used in every message (`<key>.path`, `<key>.name`).
        provided (`tuple[str]`, *optional*): other keyword arguments the caller passes when the function takes them
            (an enabled reward model's `reward_router_address`, `reward_model_tokenizer`, `model_name`).

    Returns:
        The `LoadedRewardFunction`.

    Raises:
        FileNotFoundError: the file does not exist.
        ImportError: the file or module fails to import (chained).
        AttributeError: the module has no `name`.
        TypeError: `name` is not callable, or its signature cannot take the reward manager's arguments
            (a missing parameter, a required parameter nobody passes, a `reward_kwargs` key it does not take).
    """
    module = _import(path, key=key)
    where = f"{key}.name {name!r} in {path}"
    fn = getattr(module, name, None)
    if fn is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise AttributeError(f"{where}: no such function; callables found: {', '.join(public) or '(none)'}")
    if not callable(fn):
        raise TypeError(f"{where}: not callable ({type(fn).__name__})")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError) as e:
        raise TypeError(f"{where}: cannot read its signature: {e}") from e
    batched = bool(getattr(fn, _BATCHED_ATTR, False)) or "solution_images" in params
    kwargs = dict(reward_kwargs or {})
    _check_signature(
        params, BATCHED_ARGS if batched else PER_SAMPLE_ARGS, kwargs, batched=batched, where=where, provided=provided
    )
    check = getattr(module, _CHECK_KWARGS, None)
    if callable(check):  # the module checks its own options now, not at the first step
        try:
            check(kwargs)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{key}.reward_kwargs.{e}") from e
    return LoadedRewardFunction(fn, name=f"{name} ({path})", batched=batched, reward_kwargs=kwargs)


def _check_signature(
    params: Mapping[str, inspect.Parameter],
    passed: tuple[str, ...],
    reward_kwargs: Mapping[str, Any],
    *,
    batched: bool,
    where: str,
    provided: tuple[str, ...] = (),
) -> None:
    kind = "batched" if batched else "per-sample"
    form = f"{'compute_score(' + ', '.join(passed) + ', **kwargs)'}"
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    positional_only = [n for n, p in params.items() if p.kind is inspect.Parameter.POSITIONAL_ONLY]
    if positional_only:
        raise TypeError(
            f"{where}: parameters {positional_only} are positional-only; the {kind} form is called "
            f"with keywords: {form}"
        )
    if not var_kw:
        missing = [a for a in passed if a not in params]
        if missing:
            raise TypeError(
                f"{where}: the {kind} form is called as {form}; the function lacks {', '.join(missing)} "
                "(add them or **kwargs)"
            )
        unknown = [k for k in reward_kwargs if k not in params]
        if unknown:
            raise TypeError(
                f"{where}: reward_kwargs {', '.join(unknown)} are passed but the function takes no such "
                "parameter (add it or **kwargs)"
            )
    given = set(passed) | set(reward_kwargs) | set(provided) | ({"prompts"} if batched else set())
    required = [
        n
        for n, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and n not in given
    ]
    needs_model = [n for n in required if n in _REWARD_MODEL_ARGS]
    if needs_model:
        raise TypeError(
            f"{where}: takes {', '.join(needs_model)}, which only an enabled reward model passes; set "
            "reward.reward_model.enable=true and reward.reward_model.model_path"
        )
    if required:
        raise TypeError(
            f"{where}: required parameters {', '.join(required)} are never passed (the {kind} form "
            f"is called as {form}); give them defaults or set them in reward_kwargs"
        )


def _import(path: str, *, key: str) -> Any:
    if path.startswith("pkg://"):
        module_name = path[len("pkg://") :].replace("/", ".")
        module_name = MODULE_ALIASES.get(module_name, module_name)
        try:
            return importlib.import_module(module_name)
        except ImportError as e:
            raise ImportError(f"{key}.path {path!r}: cannot import module {module_name!r}: {e}") from e
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        raise FileNotFoundError(f"{key}.path: no such file: {full} (a .py file, or pkg://dotted.module)")
    if not full.endswith(".py"):
        raise ImportError(f"{key}.path: {full} is not a .py file (a .py file, or pkg://dotted.module)")
    # one module per file, under a stable name, so Ray workers and pickling see the same module
    digest = hashlib.sha1(full.encode()).hexdigest()[:12]
    module_name = f"verl_omni_custom_reward_{os.path.splitext(os.path.basename(full))[0]}_{digest}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, full)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise ImportError(f"{key}.path: cannot load {full}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[module_name]
        raise ImportError(f"{key}.path: importing {full} raised {type(e).__name__}: {e}") from e
    return module
