"""`LLMSamplingParams`: the sampling keys LLM backends accept in a request's `sampling_params`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from verl_core.config.rollout import SamplingConfig
from verl_core.rollout.errors import BadRequestError
from verl_core.rollout.net import validation_message

__all__ = ["LLMSamplingParams", "parse_sampling_params"]


class LLMSamplingParams(BaseModel):
    """Sampling parameters shared by the LLM backends (unknown keys are rejected by name)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    temperature: float = Field(ge=0)
    top_p: float = Field(gt=0, le=1)
    top_k: int = Field(ge=-1)
    max_tokens: int = Field(ge=1)
    logprobs: bool = False
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False


def parse_sampling_params(
    model: type[LLMSamplingParams], defaults: SamplingConfig, params: dict[str, Any]
) -> LLMSamplingParams:
    """Validate `params` over the config defaults; errors name `sampling_params.<key>`.

    Raises:
        BadRequestError: an unknown key or a value out of range.
    """
    try:
        return model.model_validate({**defaults.to_dict(), **params})
    except ValidationError as e:
        message, field = validation_message(e, prefix="sampling_params")
        raise BadRequestError(message, field=field) from None
