"""The README opens with two plain sentences (what the project does, for whom) before any term of the trade."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"
JARGON = (
    "verl", "omni", "FlowGRPO", "GRPO", "diffusion", "diffusers", "Qwen", "SD3", "vLLM", "LoRA", "Ray", "Hydra",
    "#6200", "rollout", "FSDP", "shim", "dist", "monorepo", "SDE", "PPO",
)  # fmt: skip


def opening(text: str) -> tuple[str, str]:
    """The title line and the first paragraph after it."""
    lines = text.splitlines()
    title = lines[0]
    paragraph: list[str] = []
    for line in lines[1:]:
        if line.strip():
            paragraph.append(line.strip())
        elif paragraph:
            break
    return title, " ".join(paragraph)


def test_readme_opening_is_two_plain_sentences():
    title, first = opening(README.read_text(encoding="utf-8"))
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", first) if s]
    assert len(sentences) == 2, sentences
    for term in JARGON:
        pattern = re.compile(rf"(?<![\w-]){re.escape(term)}(?![\w-])", re.IGNORECASE)
        assert not pattern.search(title), f"README title uses {term!r} before saying what the project is"
        assert not pattern.search(first), f"README's first two sentences use {term!r}"
    assert "reinforcement learning" in first and "for" in sentences[1]
