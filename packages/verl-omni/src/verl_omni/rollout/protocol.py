"""The diffusion generate contract shared by every diffusion rollout backend (diffusers, vLLM-Omni).

Request (JSON): one text `prompt`, an optional `negative_prompt`, a `seed`, and `sampling_params` that override
`DiffusionSamplingConfig` fields of the server's defaults; the request makes `n` images, row `r` seeded
`seed + r`. Response (binary, `verl_core.rollout.tensor_payload`): `finish_reason`, `weight_version`, the `seed`
used, the resolved `sampling_params`, and the `trajectory` TensorDict in the layout of
`verl_omni.pipelines.sample_with_logprob` (uint8 `images` included; null when the request was aborted). The
conditioning entries (prompt embeddings and masks, negative ones under CFG) are the same for every row of a request:
they are one row expanded over the `n` rows (stride 0), and travel once.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from pydantic import ConfigDict, Field, field_validator
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
    """One prompt, `n` images (the GRPO group): text `prompt`, optional `negative_prompt`, `seed`, `sampling_params`.

    `sampling_params` keys are `DiffusionSamplingConfig` fields (`n`, `num_inference_steps`, `height`, `width`,
    `noise_level`, `sde_type`, `cps_logprob`, `sde_window_size`, `sde_window_range`, `sde_window_per_row`,
    `guidance_scale`, `max_sequence_length`); the server checks them (unknown keys: 422 naming the key). Rows are
    seeded `seed + r`; without a seed the server draws one and reports it.
    """

    negative_prompt: str | None = None

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
        trajectory (`TensorDict` of batch `[n]`, *optional*): the rows' trajectories (docs/omni/rollout.md lists the
            keys); None when `finish_reason` is `"abort"`.
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
