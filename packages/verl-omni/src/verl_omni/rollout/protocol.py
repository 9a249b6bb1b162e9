"""The diffusion generate contract shared by every diffusion rollout backend (diffusers, vLLM-Omni).

Request (JSON): a text `prompt` (or a list of `k` prompts), an optional `negative_prompt` (one for all, or a list of
one per prompt), a `seed`, and `sampling_params` that override `DiffusionSamplingConfig` fields of the server's
defaults; the request makes `k * n` images, prompt-major, row `j` seeded `seed + j` (one prompt: `k = 1`).
Response (binary, `verl_core.rollout.tensor_payload`): `finish_reason`, `weight_version`, the `seed` used, the
resolved `sampling_params`, and the `trajectory` TensorDict in the layout of `verl_omni.pipelines.sample_with_logprob`
(uint8 `images` included; null when the request was aborted): batch `[n]` for a one-text `prompt`, `[k, n]` for a
prompt list (flatten with `trajectory.reshape(-1)` for the prompt-major rows). The conditioning entries (prompt
embeddings and masks, negative ones under CFG) are the same for every row of one prompt: they are one row per prompt
expanded over its `n` rows (stride 0), and travel once per prompt.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from pydantic import ConfigDict, Field, ValidationInfo, field_validator
from tensordict import TensorDict

from verl_core.config.errors import ConfigError
from verl_core.rollout.errors import BadRequestError
from verl_core.rollout.protocol import GenerateRequest, GenerateResponse
from verl_omni.pipelines.config import DiffusionSamplingConfig

__all__ = [
    "REQUEST_KEYS",
    "DiffusionGenerateRequest",
    "DiffusionGenerateResponse",
    "parse_diffusion_sampling_params",
]

#: `DiffusionSamplingConfig` fields that a request sets through its own fields, not `sampling_params`
REQUEST_KEYS = {"seed": "seed", "negative_prompt": "negative_prompt"}


class DiffusionGenerateRequest(GenerateRequest):
    """`k` prompts x `n` images (GRPO groups): text `prompt` (or a list), optional `negative_prompt`, `seed`, params.

    `prompt` is one text or a non-empty list of texts; `negative_prompt` is one text for every prompt or, with a
    prompt list, a list of the same length (None entries = the model's default). Rows are prompt-major: row `j`
    belongs to prompt `j // n` and is seeded `seed + j`, the generators the `k` one-prompt requests seeded
    `seed + i * n` would use.

    `sampling_params` keys are `DiffusionSamplingConfig` fields (`n`, `num_inference_steps`, `height`, `width`,
    `noise_level`, `sde_type`, `cps_logprob`, `sde_window_size`, `sde_window_range`, `sde_window_per_row`,
    `guidance_scale`, `max_sequence_length`, `calculate_log_probs`); the server checks them (unknown keys: 422
    naming the key). Rows are seeded `seed + r`; without a seed the server draws one and reports it.
    """

    prompt: str | list[str] | None = None
    negative_prompt: str | list[str | None] | None = None

    @property
    def prompts(self) -> list[str]:
        """The request's prompts as a list (one prompt: a list of one)."""
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt or [])

    @property
    def negative_prompts(self) -> list[str | None]:
        """One negative prompt (or None) per prompt."""
        if isinstance(self.negative_prompt, list):
            return list(self.negative_prompt)
        return [self.negative_prompt] * len(self.prompts)

    @field_validator("prompt")
    @classmethod
    def _prompt_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value == "" or (isinstance(value, list) and (not value or not all(value))):
            raise ValueError("give a non-empty text or a non-empty list of non-empty texts")
        return value

    @field_validator("negative_prompt")
    @classmethod
    def _negative_list(cls, value: str | list[str | None] | None, info: ValidationInfo) -> Any:
        if isinstance(value, list):
            prompt = info.data.get("prompt")
            if not isinstance(prompt, list):
                raise ValueError("a list needs a list `prompt` (one negative prompt per prompt)")
            if len(value) != len(prompt):
                raise ValueError(f"{len(value)} negative prompts for {len(prompt)} prompts")
        return value

    @field_validator("prompt_ids")
    @classmethod
    def _no_token_ids(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            raise ValueError("diffusion backends take a text `prompt`; token ids are not supported")
        return value


class DiffusionGenerateResponse(GenerateResponse):
    """A diffusion answer: the trajectory TensorDict (binary over HTTP), the seed and the sampling parameters used.

    Attributes:
        seed (`int`): base seed of the rows (row `r` used `seed + r`).
        sampling_params (`dict`): the resolved `DiffusionSamplingConfig` of the request (JSON).
        trajectory (`TensorDict` of batch `[n]`, or `[k, n]` for a prompt list, *optional*): the rows' trajectories
            (docs/omni/rollout.md lists the keys); None when `finish_reason` is `"abort"`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    seed: int
    sampling_params: dict[str, Any] = Field(default_factory=dict)
    trajectory: TensorDict | None = None


def parse_diffusion_sampling_params(
    defaults: DiffusionSamplingConfig, params: dict[str, Any]
) -> DiffusionSamplingConfig:
    """The server's `defaults` with a request's `sampling_params` applied and checked.

    Raises:
        BadRequestError: an unknown key (with the closest known one), a key the request sets itself (`seed`,
            `negative_prompt`), or a value `DiffusionSamplingConfig` rejects; `field` is `sampling_params.<key>`.
    """
    known = [f.name for f in dataclasses.fields(DiffusionSamplingConfig) if f.name not in REQUEST_KEYS]
    for key in params:
        if key in REQUEST_KEYS:
            raise BadRequestError(
                f"sampling_params.{key}: set the request's `{REQUEST_KEYS[key]}` field instead",
                field=f"sampling_params.{key}",
            )
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}"
            raise BadRequestError(f"unknown sampling parameter {key!r}{hint}", field=f"sampling_params.{key}")
    try:
        return dataclasses.replace(defaults, **params)
    except ConfigError as e:
        key = e.key.rsplit(".", 1)[-1]
        raise BadRequestError(f"sampling_params.{key}: {e.body}", field=f"sampling_params.{key}") from None
