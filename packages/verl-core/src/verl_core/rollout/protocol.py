"""Request and response models of the rollout server routes (pydantic; unknown fields are rejected)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AbortRequest",
    "AbortResponse",
    "GenerateRequest",
    "GenerateResponse",
    "ShmWeightUpdateRequest",
    "SleepRequest",
    "StateResponse",
    "TokenGenerateResponse",
    "WakeUpRequest",
    "WeightUpdateResponse",
]

_REQUEST = ConfigDict(extra="forbid", strict=True)
REQUEST_ID_PATTERN = r"^[A-Za-z0-9_.:\-]{1,128}$"
FinishReason = Literal["stop", "length", "abort"]


class GenerateRequest(BaseModel):
    """One generation request, shared by LLM and diffusion backends.

    Exactly one of `prompt_ids` (token ids) and `prompt` (text the server tokenizes) is given.
    `sampling_params` override the server's defaults; each backend validates its own keys.
    """

    model_config = _REQUEST

    request_id: str | None = Field(default=None, pattern=REQUEST_ID_PATTERN)
    prompt_ids: list[int] | None = Field(default=None, min_length=1)
    prompt: str | None = Field(default=None, min_length=1)
    sampling_params: dict[str, Any] = Field(default_factory=dict)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    timeout_s: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_prompt(self) -> GenerateRequest:
        if (self.prompt_ids is None) == (self.prompt is None):
            raise ValueError("give exactly one of 'prompt_ids' (token ids) and 'prompt' (text)")
        return self


class GenerateResponse(BaseModel):
    """What every backend returns for a generate: the id, why it stopped, and the weight version used."""

    request_id: str
    finish_reason: FinishReason
    weight_version: int
    latency_s: float = 0.0
    extra: dict[str, Any] = Field(default_factory=dict)


class TokenGenerateResponse(GenerateResponse):
    """LLM backends: the generated token ids (prompt excluded), their text and optional log-probs."""

    token_ids: list[int]
    text: str | None = None
    log_probs: list[float] | None = None


class AbortRequest(BaseModel):
    """Abort the listed in-flight requests, or all of them when `request_ids` is null."""

    model_config = _REQUEST

    request_ids: list[str] | None = None


class AbortResponse(BaseModel):
    """Ids that were in flight and were asked to stop."""

    aborted: list[str]


class SleepRequest(BaseModel):
    """Free accelerator memory; `level` 1 keeps weights in host memory, 2 drops them (null: config)."""

    model_config = _REQUEST

    level: int | None = Field(default=None, ge=1, le=2)


class WakeUpRequest(BaseModel):
    """Restore what `sleep` freed; `tags` picks parts (`"weights"`, `"kv_cache"`), null means all."""

    model_config = _REQUEST

    tags: list[Literal["weights", "kv_cache"]] | None = None


class _DescriptorUpdateRequest(BaseModel):
    """A weight update whose tensors travel out of band: the update's version, kind, PEFT config, bucket size."""

    model_config = _REQUEST

    version: int = Field(ge=0)
    kind: Literal["full", "lora"] = "full"
    peft_config: dict[str, Any] | None = None
    bucket_bytes: int | None = None

    def update_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the server's `update_weights_*` methods."""
        return {"version": self.version, "kind": self.kind, "peft_config": self.peft_config,
                "bucket_bytes": self.bucket_bytes}  # fmt: skip


class ShmWeightUpdateRequest(_DescriptorUpdateRequest):
    """`POST /update_weights_shm`: a `WeightSegment` descriptor plus the update's version, kind and PEFT config."""

    segment: dict[str, Any]


class CudaIpcWeightUpdateRequest(_DescriptorUpdateRequest):
    """`POST /update_weights_cuda_ipc`: a `share_cuda` descriptor plus the update's version, kind and PEFT config."""

    cuda_ipc: dict[str, Any]


class StateResponse(BaseModel):
    """Server state after a lifecycle call."""

    state: str
    weight_version: int


class WeightUpdateResponse(BaseModel):
    """Result of a weight update: the new version and what was received."""

    weight_version: int
    kind: Literal["full", "lora"]
    num_tensors: int
    num_buckets: int
    bytes: int
    seconds: float
