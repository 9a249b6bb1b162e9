"""Shared session fixtures of the verl-omni suite: tiny random pipelines built once per session.

Stable fixture names (other test folders, e.g. tests/engine, rely on them):

- `tiny_qwen_image_path` -> `pathlib.Path` of a tiny random `QwenImagePipeline` folder (seed 0, fp32).
- `tiny_sd3_path` -> `pathlib.Path` of a tiny random `StableDiffusion3Pipeline` folder (seed 0, fp32).
- `tiny_flux_path` -> `pathlib.Path` of a tiny random guidance-distilled `FluxPipeline` folder (seed 0, fp32).
- `tiny_wan_path` -> `pathlib.Path` of a tiny random Wan 2.1 `WanPipeline` folder (seed 0, fp32; not in
  `tiny_pipeline_paths`, so image tests do not build it).
- `tiny_pipeline_paths` -> `dict[str, pathlib.Path]` keyed by adapter name (`"qwen_image"`, `"sd3"`, `"flux"`).
- `tiny_qwen_image_pipe` / `tiny_sd3_pipe` / `tiny_flux_pipe` -> the folders loaded as
  `QwenImagePipelineWithLogProb` / `StableDiffusion3PipelineWithLogProb` / `FluxPipelineWithLogProb` (fp32, CPU,
  progress bars off). Session-scoped: do not mutate the weights; load your own copy with `from_pretrained(path)`
  if a test changes them.

- `tiny_sampling_config` -> a `DiffusionSamplingConfig` for 64x64 images, 4 steps, n=2 (function scope).
"""

from __future__ import annotations

import pathlib

import pytest

TINY_SAMPLING = {
    "n": 2,
    "num_inference_steps": 4,
    "height": 64,
    "width": 64,
    "max_sequence_length": 32,
    "noise_level": 0.7,
}


@pytest.fixture(scope="session")
def tiny_pipeline_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    from verl_omni.testing import build_tiny_pipeline

    root = tmp_path_factory.mktemp("tiny_pipelines")
    return {
        name: build_tiny_pipeline(name, root / name, preset="tiny", seed=0) for name in ("qwen_image", "sd3", "flux")
    }


@pytest.fixture(scope="session")
def tiny_qwen_image_path(tiny_pipeline_paths: dict[str, pathlib.Path]) -> pathlib.Path:
    return tiny_pipeline_paths["qwen_image"]


@pytest.fixture(scope="session")
def tiny_sd3_path(tiny_pipeline_paths: dict[str, pathlib.Path]) -> pathlib.Path:
    return tiny_pipeline_paths["sd3"]


@pytest.fixture(scope="session")
def tiny_flux_path(tiny_pipeline_paths: dict[str, pathlib.Path]) -> pathlib.Path:
    return tiny_pipeline_paths["flux"]


@pytest.fixture(scope="session")
def tiny_wan_path(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A tiny random Wan 2.1 `WanPipeline` folder (seed 0, fp32); built apart, only for the tests that use it."""
    from verl_omni.testing import build_tiny_pipeline

    return build_tiny_pipeline("wan", tmp_path_factory.mktemp("tiny_wan") / "wan", preset="tiny", seed=0)


def _load(cls_name: str, path: pathlib.Path):
    import verl_omni.pipelines as pipelines

    pipe = getattr(pipelines, cls_name).from_pretrained(path)
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="session")
def tiny_qwen_image_pipe(tiny_qwen_image_path: pathlib.Path):
    return _load("QwenImagePipelineWithLogProb", tiny_qwen_image_path)


@pytest.fixture(scope="session")
def tiny_sd3_pipe(tiny_sd3_path: pathlib.Path):
    return _load("StableDiffusion3PipelineWithLogProb", tiny_sd3_path)


@pytest.fixture(scope="session")
def tiny_flux_pipe(tiny_flux_path: pathlib.Path):
    return _load("FluxPipelineWithLogProb", tiny_flux_path)


@pytest.fixture
def tiny_sampling_config():
    """A fresh `DiffusionSamplingConfig` for 64x64, 4-step, n=2 sampling (derive variants with `.evolve`)."""
    from verl_omni.pipelines import DiffusionSamplingConfig

    return DiffusionSamplingConfig(**TINY_SAMPLING)
