"""The OpenAI-compatible chat route's request model, its image decoding, and the OpenAI response it answers with.

`POST /v1/chat/completions` accepts the subset of OpenAI's chat request that the rollout servers serve: `messages`
whose content is a string or a list of `text` and `image_url` parts (images as base64 `data:` URLs only),
`max_tokens` (or `max_completion_tokens`), `temperature`, `top_p`, `seed`, `n`, and `model` (echoed back). Any other
field is refused by name (422), as `/generate` does. The request is a strict pydantic model of its own: the `openai`
package's request types are lazy `Iterable`s of every part kind OpenAI has (audio, files, tools), which would accept
what no backend here serves. The answer is the `openai` package's own `ChatCompletion`.
"""

from __future__ import annotations

import base64
import binascii
import io
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from verl_core.rollout.errors import BadRequestError, EngineError
from verl_core.rollout.protocol import REQUEST_ID_PATTERN

if TYPE_CHECKING:  # `openai` (~0.5-3 s to import) and `httpx` load only where a chat answer is built
    from openai.types.chat import ChatCompletion

__all__ = [
    "ChatCompletionRequest",
    "ChatInputs",
    "chat_completion",
    "chat_inputs",
    "forward_chat_completion",
]

_STRICT = ConfigDict(extra="forbid", strict=True)


class TextPart(BaseModel):
    """A text content part: `{"type": "text", "text": ...}`."""

    model_config = _STRICT

    type: Literal["text"]
    text: str


class ImageURL(BaseModel):
    """Where an image part's bytes are: a `data:image/<format>;base64,...` URL."""

    model_config = _STRICT

    url: str
    detail: Literal["auto", "low", "high"] | None = None  # accepted for compatibility; the backends ignore it


class ImagePart(BaseModel):
    """An image content part: `{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`."""

    model_config = _STRICT

    type: Literal["image_url"]
    image_url: ImageURL


class ChatMessage(BaseModel):
    """One message: a role and a string or a list of text and image parts (a string is read as one text part)."""

    model_config = _STRICT

    role: Literal["system", "developer", "user", "assistant"]
    content: list[Annotated[TextPart | ImagePart, Field(discriminator="type")]]
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _string_is_one_text_part(cls, value: Any) -> Any:
        return [{"type": "text", "text": value}] if isinstance(value, str) else value  # errors then name the part


class ChatCompletionRequest(BaseModel):
    """`POST /v1/chat/completions`: the OpenAI chat fields the rollout servers serve (unknown fields are refused).

    `request_id` is a verl extension (vLLM has the same): the id `/abort` takes and the answer's `id`.
    """

    model_config = _STRICT

    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    n: int = Field(default=1, ge=1, le=64)
    stream: Literal[False] | None = None  # streaming answers are not served: `stream: true` is refused by name
    request_id: str | None = Field(default=None, pattern=REQUEST_ID_PATTERN)

    def sampling_overrides(self) -> dict[str, Any]:
        """The sampling keys this request sets, as `/generate`'s `sampling_params` names them."""
        given = {
            "max_tokens": self.max_completion_tokens or self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
        }
        return {k: v for k, v in given.items() if v is not None}


@dataclass
class ChatInputs:
    """A chat request ready for a chat template: transformers-style messages and the decoded images in order.

    Args:
        messages (`list[dict]`): `{"role", "content"}` with `content` a string (text parts joined by newlines, as
            vLLM does) or, when the message has images, a list of `{"type": "text", "text"}` and `{"type": "image"}`
            parts (the form transformers' chat templates read).
        images (`list[PIL.Image.Image]`): the images of the `image` parts, in message order, as RGB.
    """

    messages: list[dict[str, Any]]
    images: list[Any] = field(default_factory=list)


def chat_inputs(request: ChatCompletionRequest, *, max_image_pixels: int = 64 * 1024 * 1024) -> ChatInputs:
    """Decode the request's images and put its messages in the form transformers' chat templates read.

    Args:
        request (`ChatCompletionRequest`): a validated request.
        max_image_pixels (`int`, *optional*, defaults to `64 * 1024 * 1024`): the largest image accepted.

    Raises:
        BadRequestError: an image URL that is not a base64 `data:image/...` URL, bad base64, bytes that are not an
            image, or an image larger than `max_image_pixels` (the field is `messages.<i>.content.<j>.image_url.url`).
    """
    messages, images = [], []
    for i, message in enumerate(request.messages):
        if all(isinstance(part, TextPart) for part in message.content):  # text-only templates read a string
            messages.append({"role": message.role, "content": "\n".join(part.text for part in message.content)})
            continue
        parts: list[dict[str, Any]] = []
        for j, part in enumerate(message.content):
            if isinstance(part, TextPart):
                parts.append({"type": "text", "text": part.text})
            else:
                images.append(_decode_data_url(part.image_url.url, f"messages.{i}.content.{j}.image_url.url",
                                               max_image_pixels))  # fmt: skip
                parts.append({"type": "image"})
        messages.append({"role": message.role, "content": parts})
    return ChatInputs(messages=messages, images=images)


def _decode_data_url(url: str, where: str, max_pixels: int) -> Any:
    from PIL import Image, UnidentifiedImageError

    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:image/") or not head.endswith(";base64"):
        raise BadRequestError(
            f"`{where}`: expected a base64 data URL `data:image/<format>;base64,<data>`, got {url[:40]!r}"
            " (http(s) URLs are not fetched)",
            field=where,
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise BadRequestError(f"`{where}`: invalid base64: {e}", field=where) from None
    try:
        with Image.open(io.BytesIO(raw)) as image:
            if image.width * image.height > max_pixels:
                raise BadRequestError(
                    f"`{where}`: image of {image.width}x{image.height} pixels exceeds {max_pixels}", field=where
                )
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as e:
        raise BadRequestError(f"`{where}`: not a readable image: {type(e).__name__}: {e}", field=where) from None


def chat_completion(
    request_id: str, model: str, texts: Sequence[str], finish_reasons: Sequence[str], prompt_tokens: int,
    completion_tokens: int,
) -> ChatCompletion:  # fmt: skip
    """Build the OpenAI `ChatCompletion` answer: one assistant choice per generated text, and the token usage."""
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion, ChatCompletionMessage
    from openai.types.chat.chat_completion import Choice

    choices = [
        Choice(
            index=i, finish_reason=reason, logprobs=None, message=ChatCompletionMessage(role="assistant", content=text)
        )
        for i, (text, reason) in enumerate(zip(texts, finish_reasons, strict=True))
    ]
    usage = CompletionUsage(
        prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
    )  # fmt: skip
    return ChatCompletion(
        id=request_id, object="chat.completion", created=int(time.time()), model=model, choices=choices, usage=usage
    )


async def forward_chat_completion(app: Any, body: dict[str, Any], path: str = "/v1/chat/completions") -> ChatCompletion:
    """POST a chat request to an OpenAI-compatible ASGI app in this process and return its answer.

    Used by `vLLMHttpServer`, whose mounted vLLM app serves the chat itself; no socket is involved, and cancelling
    the await (the server's request timeout) cancels the app's handler.

    Raises:
        BadRequestError: the app answered 4xx (its message is kept).
        EngineError: the app answered 5xx, or a body that is not an OpenAI `ChatCompletion`.
    """
    import httpx
    from openai.types.chat import ChatCompletion

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://in-process") as client:
        response = await client.post(path, json=body, timeout=None)  # bounded by the server's request timeout
    if response.status_code >= 400:
        error_type = BadRequestError if response.status_code < 500 else EngineError
        raise error_type(f"chat backend answered {response.status_code}: {response.text[:500]}")
    try:
        return ChatCompletion.model_validate_json(response.content)
    except ValidationError as e:
        raise EngineError(f"chat backend answered a body that is not an OpenAI ChatCompletion: {e}") from None
