"""Prompt data for diffusion RL: datasets from parquet / jsonl / text / built-in sets and a resumable sampler."""

from verl_omni.data.builtin import BUILTIN_PROMPT_SETS
from verl_omni.data.config import DataConfig
from verl_omni.data.dataset import DataError, DataFileNotFoundError, PromptDataset, PromptRecord, prompt_text
from verl_omni.data.sampler import PromptSampler, iter_batches

__all__ = [
    "BUILTIN_PROMPT_SETS",
    "DataConfig",
    "DataError",
    "DataFileNotFoundError",
    "PromptDataset",
    "PromptRecord",
    "PromptSampler",
    "iter_batches",
    "prompt_text",
]
