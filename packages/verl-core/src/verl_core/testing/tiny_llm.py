"""Tiny random test models, no download: a Qwen2 causal LM folder with a local tokenizer, new weights, LoRA adapters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["TINY_WORDS", "build_tiny_llm", "random_lora", "random_state_dict"]

_WORDS = (
    "the a an of to in and is are was be for on with as at by it this that from or not but what all were when "
    "we there can more if no out so said up its about into than them only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people how too little "
    "state good very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used take three"
)
TINY_WORDS = tuple(_WORDS.split())


def build_tiny_llm(
    path: str | Path, *, hidden_size: int = 32, num_layers: int = 2, vocab_size: int = 384, seed: int = 0
) -> Path:
    """Write a random Qwen2 causal LM and a byte-level BPE tokenizer trained on a word list; return the folder.

    Args:
        path (`str` or `Path`): output folder (created).
        hidden_size (`int`, *optional*, defaults to `32`): model width.
        num_layers (`int`, *optional*, defaults to `2`): decoder layers.
        vocab_size (`int`, *optional*, defaults to `384`): BPE vocabulary size (256 bytes + merges + 4 specials).
        seed (`int`, *optional*, defaults to `0`): seed of the random weights.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    # a byte-level BPE trained on a word list: the format AutoTokenizer expects for a qwen2 model
    specials = ["<pad>", "<unk>", "<bos>", "<eos>"]
    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = [" ".join(TINY_WORDS[i:] + TINY_WORDS[:i]) for i in range(0, len(TINY_WORDS), 7)]
    core.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<bos>", eos_token="<eos>"
    )
    tokenizer.save_pretrained(out)
    vocab = core.get_vocab()
    config = Qwen2Config(
        vocab_size=((len(vocab) + 63) // 64) * 64,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=vocab["<pad>"],
        bos_token_id=vocab["<bos>"],
        eos_token_id=vocab["<eos>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    for p in model.parameters():  # wider than the default init, so outputs depend strongly on weights
        torch.nn.init.normal_(p, std=0.5)
    model.save_pretrained(out)
    return out


def random_state_dict(path: str | Path, *, seed: int) -> dict[str, torch.Tensor]:
    """A new random state dict with the names and shapes of the model saved at `path`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path))
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=gen) * 0.5 for k, v in model.state_dict().items()}


def random_lora(path: str | Path, *, seed: int, r: int = 4) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """LoRA tensors (as `peft.get_peft_model_state_dict` names them) of a random adapter on q_proj/v_proj.

    Args:
        path (`str` or `Path`): the model folder the adapter is built on.
        seed (`int`): seed of the adapter weights (drawn with std 1, so outputs change visibly).
        r (`int`, *optional*, defaults to `4`): adapter rank; `lora_alpha` is `2 * r`.

    Returns:
        `tuple[dict[str, torch.Tensor], dict]`: the adapter tensors and its PEFT config as a dict.
    """
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    config = LoraConfig(r=r, lora_alpha=2 * r, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(path), config)
    for name, p in model.named_parameters():
        if "lora_" in name:
            torch.nn.init.normal_(p, std=1.0)
    return get_peft_model_state_dict(model), config.to_dict()
