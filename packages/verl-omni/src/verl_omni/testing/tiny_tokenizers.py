"""The tokenizers of the tiny random pipelines, trained in memory on a few sentences (nothing is downloaded).

Used by `verl_omni.testing.tiny` and `verl_omni.testing.tiny_wan` (a leaf module: it imports neither).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

__all__ = ["SENTENCES", "byte_level_bpe", "clip_tokenizer", "qwen_tokenizer", "t5_tokenizer"]

SENTENCES = [
    "a photo of a cat sitting on a red chair",
    "a watercolor painting of a mountain lake at sunrise",
    "an astronaut riding a horse on the moon",
    "a bowl of fruit with apples, oranges and bananas",
    "the word HELLO written in neon letters on a brick wall",
    "two dogs playing in the snow, high resolution, detailed",
    "Describe the image by detailing the color, shape, size, texture, quantity, text, spatial relationships",
    "of the objects and background: system user assistant",
]
QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def byte_level_bpe(vocab_size: int, specials: list[str]) -> Any:
    """A byte-level BPE (`tokenizers.Tokenizer`) of `vocab_size` trained on `SENTENCES`, with `specials`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(SENTENCES, trainer=trainer)
    return tok


def qwen_tokenizer(tmp: pathlib.Path) -> Any:
    """A `Qwen2Tokenizer` on a byte-level BPE with Qwen's chat and vision specials (`tmp`: a scratch folder)."""
    from transformers import Qwen2Tokenizer

    bpe = byte_level_bpe(400, [])
    bpe.model.save(str(tmp))
    vocab = json.loads((tmp / "vocab.json").read_text())
    merges = [tuple(line.split(" ")) for line in (tmp / "merges.txt").read_text().splitlines()[1:] if line]
    tok = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
    )
    tok.add_special_tokens({"additional_special_tokens": QWEN_SPECIALS[1:]})
    tok.add_tokens([QWEN_SPECIALS[0]], special_tokens=True)
    return tok


def clip_tokenizer() -> Any:
    """A character-level `CLIPTokenizer` (77 tokens) over the characters of `SENTENCES` and the digits."""
    from transformers import CLIPTokenizer

    chars = sorted({c for s in SENTENCES for c in s.lower() if not c.isspace()} | set("0123456789"))
    vocab: dict[str, int] = {}
    for c in chars:
        vocab.setdefault(c, len(vocab))
        vocab.setdefault(c + "</w>", len(vocab))
    for special in ("<|startoftext|>", "<|endoftext|>"):
        vocab[special] = len(vocab)
    return CLIPTokenizer(
        vocab=vocab,
        merges=[],
        model_max_length=77,
        pad_token="<|endoftext|>",
    )


def t5_tokenizer() -> Any:
    """A SentencePiece-style Unigram tokenizer, as T5's is.

    Loaders that build `T5Tokenizer` (vLLM-Omni's SD3) need a Unigram model: a byte-level BPE fails there with
    "'dict' object is not an instance of 'Sequence'".
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import T5TokenizerFast

    unigram = Tokenizer(models.Unigram())
    unigram.pre_tokenizer = pre_tokenizers.Metaspace()
    unigram.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False
    )
    unigram.train_from_iterator(SENTENCES, trainer=trainer)
    return T5TokenizerFast(
        tokenizer_object=unigram, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", extra_ids=0,
        model_max_length=512,
    )  # fmt: skip
