"""The one module that knows vLLM-Omni versions: detection, the supported pairs, and every version branch.

Versions are read from package metadata (`importlib.metadata`), never by importing vllm / vllm-omni (importing
vllm-omni needs a working vLLM and takes seconds). The releases checked and where each behaviour starts come
from `contract.py` (`RELEASES`, rows with a `feature`): `nox -s vllm_omni-<version>` proves statically that each
release has what its branch here uses. Every vllm / vllm-omni import in this module is lazy.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from importlib import metadata
from typing import Any

from verl_omni.rollout.vllm_omni import contract

__all__ = [
    "INSTALL_HINT",
    "MIN_VERSION",
    "OmniRuntime",
    "UnsupportedVersionError",
    "build_diffusion_output",
    "detect",
    "features",
    "media_output",
    "minor",
    "read_request_output",
    "request_items",
    "require",
    "supported_pairs",
]

logger = logging.getLogger(__name__)

INSTALL_HINT = 'pip install "verl-omni[vllm-omni]"'
MIN_VERSION = (0, 18)
"""0.14 / 0.16 lack collective_rpc, LoRA RPCs, a real sleep / wake and the worker-extension plumbing."""
_WARNED: set[str] = set()


class UnsupportedVersionError(ValueError):
    """The installed vllm-omni / vllm pair is not one this backend supports (the message lists those that are)."""


def minor(version: str) -> tuple[int, int]:
    """`(major, minor)` of a version string: `"0.27.0rc1"` -> `(0, 27)`, `"0.25.1.dev3+gabc"` -> `(0, 25)`."""
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1].split("+")[0] if ch.isdigit()) or "x")
    except (IndexError, ValueError):
        raise ValueError(f"version {version!r}: expected MAJOR.MINOR[.PATCH]") from None


def _text(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def supported_pairs() -> list[str]:
    """The vllm-omni / vllm pairs this backend is checked against, e.g. `"vllm-omni 0.30.x + vllm 0.30.x"`."""
    return [f"vllm-omni {_text(minor(r.omni))}.x + vllm {_text(minor(r.vllm))}.x" for r in contract.RELEASES]


def features(version: str) -> dict[str, bool]:
    """Every version branch (a `feature` of the contract) and whether it is on for vllm-omni `version`.

    A version newer than the newest checked release gets that release's branches.
    """
    v = min(minor(version), max(minor(r.omni) for r in contract.RELEASES))
    out: dict[str, bool] = {}
    for row in contract.EXPECTATIONS:
        if row.feature and row.feature not in out:
            on = (row.since is None or v >= minor(row.since)) and (row.before is None or v < minor(row.before))
            out[row.feature] = on
    return out


@dataclasses.dataclass(frozen=True)
class OmniRuntime:
    """The installed pair and its version branches.

    Args:
        omni (`str`): the vllm-omni version.
        vllm (`str`): the vllm version.
        features (`dict[str, bool]`): `features(omni)`.
    """

    omni: str
    vllm: str
    features: dict[str, bool]

    def has(self, feature: str) -> bool:
        """Whether branch `feature` (a contract row's `feature`) is on; unknown names raise `KeyError`."""
        try:
            return self.features[feature]
        except KeyError:
            raise KeyError(f"unknown vLLM-Omni feature {feature!r}; known: {sorted(self.features)}") from None


def detect(omni: str | None = None, vllm: str | None = None) -> OmniRuntime:
    """Check a vllm-omni / vllm pair (default: the installed ones, from package metadata) and return its branches.

    Raises:
        ImportError: vllm-omni or vllm is not installed (says which extra to install).
        UnsupportedVersionError: vllm-omni older than 0.18, or a vllm whose major.minor differs from vllm-omni's
            (lists the supported pairs).
    """
    omni = omni or _installed("vllm-omni")
    vllm = vllm or _installed("vllm")
    pairs = "; ".join(supported_pairs())
    if minor(omni) < MIN_VERSION:
        raise UnsupportedVersionError(
            f"vllm-omni {omni} is not supported: the vLLM-Omni backend needs vllm-omni >= {_text(MIN_VERSION)} "
            f"(older releases have no collective_rpc, LoRA RPCs or worker extensions). Supported pairs: {pairs}"
        )
    if minor(vllm) != minor(omni):
        raise UnsupportedVersionError(
            f"vllm {vllm} does not match vllm-omni {omni}: vllm-omni is released against the vLLM of the same "
            f"major.minor; install vllm=={_text(minor(omni))}.* (or the vllm-omni matching your vllm). "
            f"Supported pairs: {pairs}"
        )
    newest = max(contract.RELEASES, key=lambda r: minor(r.omni))
    if minor(omni) > minor(newest.omni) and omni not in _WARNED:
        _WARNED.add(omni)
        logger.warning(
            "vllm-omni %s is newer than %s, the newest release the vLLM-Omni backend was checked against; "
            "running with the %s code paths",
            omni,
            newest.omni,
            newest.omni,
        )
    return OmniRuntime(omni=omni, vllm=vllm, features=features(omni))


@functools.cache
def require(what: str = "vLLMOmniHttpServer") -> OmniRuntime:
    """`detect()` for the installed pair, cached; the error says what needs it.

    Raises:
        ImportError: vllm-omni or vllm is missing (says `pip install "verl-omni[vllm-omni]"`).
        UnsupportedVersionError: an unsupported pair (lists the supported ones).
    """
    try:
        return detect()
    except ImportError as e:
        raise ImportError(f"{what} needs vllm-omni and vllm: {e}") from e


def _installed(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        raise ImportError(f"{dist} is not installed; install the optional extra with `{INSTALL_HINT}`") from None


# ---- engine side (vLLMOmniHttpServer) --------------------------------------------------------------------------------


def engine_kwargs(
    runtime: OmniRuntime, kwargs: dict[str, Any], *, supports_request_batch: bool, lora: bool = False
) -> dict[str, Any]:
    """Adapt `AsyncOmni(**kwargs)` to the release: drop what it does not forward, refuse what it cannot do.

    Raises:
        UnsupportedVersionError: `max_num_seqs > 1` before 0.20 (the stage hard-codes 1), or on a pipeline without
            request batching (0.26+ refuses it at start-up; earlier releases would run one request at a time);
            `lora_backend` before 0.28, or `lora_backend="distill"` while LoRA weights are synced (`lora`).
    """
    out = dict(kwargs)
    backend = out.get("lora_backend")
    if backend is not None and not runtime.has("lora_backend"):
        raise UnsupportedVersionError(
            f"rollout.engine_kwargs.vllm_omni.lora_backend={backend!r} needs vllm-omni >= 0.28 "
            f"(installed: {runtime.omni}); remove the key"
        )
    if lora and str(getattr(backend, "value", backend)) == "distill":
        raise UnsupportedVersionError(
            "rollout.engine_kwargs.vllm_omni.lora_backend='distill' fuses one adapter at load time and has no LoRA "
            "manager, so LoRA weight sync cannot work; use 'peft' (the default) or set rollout.lora.rank=0"
        )
    seqs = int(out.get("max_num_seqs", 1))
    if seqs > 1 and not runtime.has("forwards_max_num_seqs"):
        raise UnsupportedVersionError(
            f"rollout.engine_kwargs.vllm_omni.max_num_seqs={seqs}: vllm-omni {runtime.omni} runs one request at a "
            "time (max_num_seqs is forwarded from 0.20 on); set rollout.engine_kwargs.vllm_omni.max_num_seqs=1"
        )
    if seqs > 1 and not supports_request_batch:
        raise UnsupportedVersionError(
            f"rollout.engine_kwargs.vllm_omni.max_num_seqs={seqs}: the verl-omni log-prob pipelines do not batch "
            f"requests (supports_request_batch=False); vllm-omni {runtime.omni} would "
            + ("refuse to start" if runtime.has("max_num_seqs_guard") else "still run them one at a time")
            + "; set rollout.engine_kwargs.vllm_omni.max_num_seqs=1 and send n images per request instead"
        )
    if not runtime.has("forwards_max_num_seqs"):
        out.pop("max_num_seqs", None)
    out.pop("fault_tolerance_config", None)  # vLLM 0.27+ auto-enables it when round-tripped through asdict
    return out


def create_engine(kwargs: dict[str, Any]) -> Any:
    """`AsyncOmni(**kwargs)` (`vllm_omni.entrypoints.async_omni`; a lazy `__getattr__` re-export in 0.30)."""
    from vllm_omni.entrypoints.async_omni import AsyncOmni

    return AsyncOmni(**kwargs)


def envelope_post_processing(runtime: OmniRuntime, model_class_name: str) -> bool:
    """Let the served model's image post-processing take the output envelope the log-prob pipelines return.

    From 0.26 the pipelines return `{"payload": {"image": ...}, "metadata": {...}}` (`"video"` for Wan;
    `build_diffusion_output`). Qwen-Image's post-processing unwraps it; SD3's and FLUX's (0.26) take tensors only
    (every SD3 request failed with "Input for postprocessing is in incorrect format: <class 'dict'>"), and Wan's
    takes a tensor and returns an envelope of its own. The factory that vLLM-Omni's registry
    (`_DIFFUSION_POST_PROCESS_FUNCS`) names for `model_class_name` is wrapped in its module, in this process (where
    the engine's post-processing is built): the function it makes applies to `payload["video"]` or
    `payload["image"]`, merges an envelope it returns, and passes the pipeline's metadata on. Idempotent; returns
    whether a factory is now wrapped.
    """
    if not runtime.has("output_envelope"):
        return False
    import importlib

    try:
        from vllm_omni.diffusion import registry
    except ImportError:
        return False
    func_name = getattr(registry, "_DIFFUSION_POST_PROCESS_FUNCS", {}).get(model_class_name)
    entry = getattr(registry, "_DIFFUSION_MODELS", {}).get(model_class_name)
    if func_name is None or entry is None:
        return False
    folder, relname = entry[0], entry[1]
    module = importlib.import_module(folder if relname == "" else f"vllm_omni.diffusion.models.{folder}.{relname}")
    factory = getattr(module, func_name)
    if not getattr(factory, "__verl_envelope__", False):
        setattr(module, func_name, _envelope_factory(factory))
    return True


def _envelope_factory(factory: Any) -> Any:
    """A post-processing factory whose functions unwrap the output envelope around `factory`'s."""
    import functools
    import inspect

    @functools.wraps(factory)
    def make(od_config: Any) -> Any:
        inner = factory(od_config)
        if inner is None:
            return None

        def unwrap(images: Any, **kwargs: Any) -> Any:
            if isinstance(images, dict) and isinstance(images.get("payload"), dict):
                payload = dict(images["payload"])
                key = "video" if "video" in payload else "image"
                metadata = images.get("metadata")
                metadata = dict(metadata) if isinstance(metadata, dict) else {}
                result = inner(payload[key], **kwargs)
                if isinstance(result, dict) and isinstance(result.get("payload"), dict):  # Wan's returns an envelope
                    del payload[key]
                    payload.update(result["payload"])
                    extra = result.get("metadata")
                    metadata = {**(extra if isinstance(extra, dict) else {}), **metadata}
                else:
                    payload[key] = result
                return {"payload": payload, "metadata": metadata}
            return inner(images, **kwargs)

        if "sampling_params" in inspect.signature(inner).parameters:  # the engine passes it only when named

            def post_process(images: Any, sampling_params: Any = None) -> Any:
                return unwrap(images, sampling_params=sampling_params)
        else:

            def post_process(images: Any) -> Any:
                return unwrap(images)

        return post_process

    make.__verl_envelope__ = True  # type: ignore[attr-defined]
    return make


async def abort(runtime: OmniRuntime, engine: Any, request_ids: list[str], timeout: float) -> None:
    """`engine.abort(ids)`; 0.30 also bounds the abort inside the engine (`timeout=`)."""
    if runtime.has("abort_timeout"):
        await engine.abort(request_ids, timeout=timeout)
    else:
        await engine.abort(request_ids)


def sampling_params(fields: dict[str, Any], extra_args: dict[str, Any], lora_request: Any) -> Any:
    """`OmniDiffusionSamplingParams(**fields, extra_args=..., lora_request=...)` (fields common to 0.18-0.30)."""
    from vllm_omni.inputs.data import OmniDiffusionSamplingParams

    return OmniDiffusionSamplingParams(**fields, extra_args=dict(extra_args), lora_request=lora_request)


def lora_request(name: str, int_id: int, path: str) -> Any:
    """The plain `LoRARequest` generate requests carry to select an adapter registered by id."""
    from vllm.lora.request import LoRARequest

    return LoRARequest(lora_name=name, lora_int_id=int_id, lora_path=path)


_RL_KEY = "verl_trajectory"


def read_request_output(runtime: OmniRuntime, output: Any) -> tuple[dict[str, Any], str]:
    """`(trajectory tensors, finish reason)` from the final `OmniRequestOutput` of a generate.

    0.18-0.24 carry the trajectory in `custom_output`; 0.26+ in `multimodal_output["metadata"]` (the envelope's
    metadata group). The finish reason is in `request_output` before 0.28, in `outputs` from 0.28; a diffusion
    result without one finished normally.
    """
    if runtime.has("output_envelope"):
        meta = (getattr(output, "multimodal_output", None) or {}).get("metadata") or {}
        trajectory = meta.get(_RL_KEY) or {}
    else:
        trajectory = (getattr(output, "custom_output", None) or {}).get(_RL_KEY) or {}
    trajectory = dict(trajectory)
    if runtime.has("trajectory_fields"):  # the native fields, should a transport drop the metadata group
        for key in ("latents", "log_probs", "timesteps"):
            value = getattr(output, f"trajectory_{key}", None)
            if key not in trajectory and value is not None:
                trajectory[key] = value
    holder = getattr(output, "request_output", None) if runtime.has("nested_request_output") else output
    outputs = getattr(holder, "outputs", None) or []
    reason = getattr(outputs[0], "finish_reason", None) if outputs else None
    return trajectory, ("abort" if reason == "abort" else "stop")


def build_diffusion_output(runtime: OmniRuntime, images: Any, trajectory: dict[str, Any], video: bool = False) -> Any:
    """The `DiffusionOutput` a custom pipeline returns, in the layout the release forwards to the client.

    `images` are uint8 `(B, 3, H, W)`, or with `video` uint8 videos `(B, F, 3, H, W)`; `trajectory` maps names to
    tensors with batch dim B (the server reads it back, uint8 images included). The media output is the images as
    floats in [-1, 1], what the stock pipelines' decode hands to vLLM-Omni's post-processing: images as they are,
    videos as `(B, 3, F, H, W)` under the envelope's `"video"` key (what Wan's `vae.decode` returns).
    """
    from vllm_omni.diffusion.data import DiffusionOutput

    media = media_output(images, video)
    kwargs: dict[str, Any] = {}
    if runtime.has("trajectory_fields"):
        kwargs.update(
            trajectory_latents=trajectory.get("latents"),
            trajectory_log_probs=trajectory.get("log_probs"),
            trajectory_timesteps=trajectory.get("timesteps"),
        )
    if runtime.has("output_to_cpu"):
        kwargs["to_cpu"] = True
    if runtime.has("output_envelope"):
        key = "video" if video else "image"
        return DiffusionOutput(output={"payload": {key: media}, "metadata": {_RL_KEY: trajectory}}, **kwargs)
    return DiffusionOutput(output=media, custom_output={_RL_KEY: trajectory}, **kwargs)


def media_output(images: Any, video: bool = False) -> Any:
    """uint8 images `(B, 3, H, W)` (videos `(B, F, 3, H, W)`) as the floats in [-1, 1] a stock decode returns.

    Raises:
        ValueError: `images` is not 4-D (5-D with `video`).
    """
    if images.dim() != (5 if video else 4):
        what = "videos (B, F, 3, H, W)" if video else "images (B, 3, H, W)"
        raise ValueError(f"images: expected uint8 {what}, got shape {tuple(images.shape)}")
    media = images.float() / 127.5 - 1.0
    return media.permute(0, 2, 1, 3, 4) if video else media


def request_items(runtime: OmniRuntime, req: Any) -> list[tuple[Any, Any]]:
    """`(prompt, sampling params)` per request of a pipeline `forward` input.

    0.18-0.22 pass one `OmniDiffusionRequest` (`prompts`, one `sampling_params`); 0.24+ a `DiffusionRequestBatch`
    (`prompts`, `sampling_params_list`).
    """
    prompts = list(req.prompts)
    if runtime.has("request_batch"):
        return list(zip(prompts, req.sampling_params_list))
    return [(p, req.sampling_params) for p in prompts]
