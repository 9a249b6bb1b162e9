"""Shared fixtures of the rollout tests: one tiny random LLM folder per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl_core.testing.tiny_llm import build_tiny_llm


@pytest.fixture(scope="session")
def tiny_llm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers.utils import logging

    logging.disable_progress_bar()
    return build_tiny_llm(tmp_path_factory.mktemp("tiny-llm"))
