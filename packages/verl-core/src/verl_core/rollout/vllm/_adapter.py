"""The one module that touches vLLM: lazy imports and every version-dependent call.

Nothing here imports vllm at module import time. Each function imports what it needs and names the
vLLM symbol it relies on, so a change in vLLM breaks one place.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from typing import Any

__all__ = [
    "INSTALL_HINT",
    "LORA_RANKS",
    "create_async_llm",
    "lora_request",
    "mount_openai_routes",
    "require_vllm",
    "sampling_params",
    "tokens_prompt",
]

logger = logging.getLogger(__name__)

INSTALL_HINT = 'install the optional extra with `pip install "verl-core[vllm]"` (or `pip install vllm`)'
# vLLM's allowed `max_lora_rank` values (`vllm.config.lora.MaxLoRARanks`), used when vLLM is absent.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def require_vllm(what: str = "vLLMHttpServer") -> Any:
    """Import and return the `vllm` module, or raise an ImportError that says how to install it."""
    try:
        return importlib.import_module("vllm")
    except ImportError as e:
        raise ImportError(f"{what} needs vLLM, which is not installed: {INSTALL_HINT}. ({e})") from e


def lora_ranks() -> tuple[int, ...]:
    """The `max_lora_rank` values vLLM accepts (`vllm.config.lora.MaxLoRARanks` when importable)."""
    from typing import get_args

    try:
        from vllm.config.lora import MaxLoRARanks  # type: ignore[import-not-found]
    except ImportError as e:  # vllm absent, or a release that names the ranks elsewhere: use the known list
        logger.debug("vllm.config.lora.MaxLoRARanks is not importable (%s); using %s", e, LORA_RANKS)
        return LORA_RANKS
    try:
        ranks = tuple(sorted(int(r) for r in get_args(MaxLoRARanks)))
    except (TypeError, ValueError) as e:  # a release whose MaxLoRARanks is no Literal of ints
        logger.warning("vllm.config.lora.MaxLoRARanks is not a Literal of ints (%s); using %s", e, LORA_RANKS)
        return LORA_RANKS
    return ranks or LORA_RANKS


def create_async_llm(engine_args: dict[str, Any]) -> Any:
    """Build `vllm.v1.engine.async_llm.AsyncLLM` from a dict of `vllm.engine.arg_utils.AsyncEngineArgs` fields.

    Raises:
        ValueError: a key is not an `AsyncEngineArgs` field (names it).
    """
    require_vllm()
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    known = set(getattr(AsyncEngineArgs, "__dataclass_fields__", {}))
    unknown = sorted(k for k in engine_args if known and k not in known)
    if unknown:
        raise ValueError(
            f"rollout.engine_kwargs.vllm.{unknown[0]} is not an argument of vllm AsyncEngineArgs "
            f"(unknown: {', '.join(unknown)})"
        )
    return AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_args))


def sampling_params(**kwargs: Any) -> Any:
    """`vllm.SamplingParams(**kwargs)`."""
    from vllm import SamplingParams

    return SamplingParams(**kwargs)


def tokens_prompt(prompt_token_ids: list[int]) -> Any:
    """`vllm.inputs.TokensPrompt` for token-id input."""
    from vllm.inputs import TokensPrompt

    return TokensPrompt(prompt_token_ids=prompt_token_ids)


def lora_request(name: str, int_id: int, path: str) -> Any:
    """`vllm.lora.request.LoRARequest(lora_name, lora_int_id, lora_path)` for an adapter folder."""
    from vllm.lora.request import LoRARequest

    return LoRARequest(lora_name=name, lora_int_id=int_id, lora_path=path)


async def mount_openai_routes(app: Any, engine: Any, engine_args: dict[str, Any], served_name: str) -> Any:
    """Mount vLLM's OpenAI-compatible app (`/v1/completions`, `/v1/chat/completions`, ...) under `/openai`; return it.

    Uses vLLM's `build_app` and `init_app_state` with arguments parsed by vLLM's own CLI parser
    (`make_arg_parser`): from `vllm.entrypoints.launchers.*` in 0.30, `vllm.entrypoints.openai.*` before.
    So the served routes are exactly vLLM's. Signatures checked against vLLM 0.30.0.
    """
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:  # vLLM >= 0.30 (the openai.api_server names still exist there, deprecated)
        from vllm.entrypoints.launchers.api_server.app_state import init_app_state
        from vllm.entrypoints.launchers.app import build_app
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # older releases
        from vllm.entrypoints.openai.api_server import build_app, init_app_state
        from vllm.entrypoints.openai.cli_args import make_arg_parser

    parser = make_arg_parser(FlexibleArgumentParser())
    args = parser.parse_args(["--model", engine_args["model"], "--served-model-name", served_name])
    extra: dict[str, Any] = {}
    if "supported_tasks" in inspect.signature(build_app).parameters and hasattr(engine, "get_supported_tasks"):
        extra["supported_tasks"] = await engine.get_supported_tasks()
    openai_app = build_app(args, **extra)
    await init_app_state(engine, openai_app.state, args, **extra)
    app.mount("/openai", openai_app)  # a mounted app's lifespan does not run; vLLM's only starts stat loggers
    return openai_app
