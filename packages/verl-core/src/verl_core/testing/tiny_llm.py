"""Tiny random test models, no download: Qwen2 LM and Qwen2.5-VL folders with local tokenizers, weights, LoRAs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

__all__ = ["TINY_WORDS", "build_tiny_llm", "build_tiny_vlm", "random_lora", "random_state_dict"]

_WORDS = (
    "the a an of to in and is are was be for on with as at by it this that from or not but what all were when "
    "we there can more if no out so said up its about into than them only other new some could time these two "
    "may then do first any my now such like our over man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people how too little "
    "state good very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used take three"
)
TINY_WORDS = tuple(_WORDS.split())
_VLM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
                 "<|video_pad|>"]  # fmt: skip
# a Qwen-style chat template: string content or a list of text and image parts, one image placeholder per image
VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _word_bpe(vocab_size: int, specials: list[str]) -> Any:
    """A byte-level BPE trained on `TINY_WORDS`: the format AutoTokenizer expects for qwen2 models."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [" ".join(TINY_WORDS[i:] + TINY_WORDS[:i]) for i in range(0, len(TINY_WORDS), 7)]
    core.train_from_iterator(corpus, trainer=trainer)
    return core


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
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    core = _word_bpe(vocab_size, ["<pad>", "<unk>", "<bos>", "<eos>"])
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


def build_tiny_vlm(
    path: str | Path,
    *,
    hidden_size: int = 32,
    num_heads: int = 4,
    vision_heads: int = 2,
    seed: int = 0,
    num_layers: int = 2,
    vision_depth: int = 1,
    max_pixels: int = 56 * 56,
    init_std: float = 0.5,
    dtype: str | None = None,
) -> Path:
    """Write a random Qwen2.5-VL, its tokenizer with a chat template, and an image processor; return the folder.

    The model is `Qwen2_5_VLForConditionalGeneration`, the image processor Qwen2-VL's (PIL backend); it resizes
    every image to 28x28 .. 56x56 pixels (1 to 4 image tokens), so a chat with images runs in well under a second
    on a CPU. `HFHttpServer` serves it (`AutoModelForImageTextToText`).

    Args:
        path (`str` or `Path`): output folder (created).
        hidden_size (`int`, *optional*, defaults to `32`): width of the language model and of the vision tower.
        num_heads (`int`, *optional*, defaults to `4`): attention heads of the language model (half as many KV
            heads). vLLM's attention kernels need a head size of 32 or more: e.g. `hidden_size=256, num_heads=4`.
        vision_heads (`int`, *optional*, defaults to `2`): attention heads of the vision tower.
        seed (`int`, *optional*, defaults to `0`): seed of the random weights.
        num_layers (`int`, *optional*, defaults to `2`): decoder layers of the language model.
        vision_depth (`int`, *optional*, defaults to `1`): blocks of the vision tower.
        max_pixels (`int`, *optional*, defaults to `56 * 56`): the image processor's largest image, in pixels
            (images are resized to at most this; 4 image tokens per 28x28 pixels). Prompts stay under the model's
            512 positions up to about `448 * 448` (256 image tokens).
        init_std (`float`, *optional*, defaults to `0.5`): std of the random weights. The default is wide so answers
            depend strongly on weights and images; a wide, deep model (a benchmark's) needs a small one, e.g. 0.02,
            to keep its activations finite in bf16.
        dtype (`str`, *optional*): the dtype the weights are saved in (e.g. `"bfloat16"`, half the size of the
            default float32).
    """
    from transformers import PreTrainedTokenizerFast, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    core = _word_bpe(384, _VLM_SPECIALS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=_VLM_SPECIALS[1:],
    )
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    # the PIL image processor: the default one needs torchvision, which verl-core does not depend on
    images = Qwen2VLImageProcessorPil(
        min_pixels=28 * 28, max_pixels=max_pixels, patch_size=14, merge_size=2, temporal_patch_size=2
    )
    images.save_pretrained(out)
    vocab = core.get_vocab()
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": ((len(vocab) + 63) // 64) * 64,
            "hidden_size": hidden_size,
            "intermediate_size": hidden_size * 2,
            "num_hidden_layers": num_layers,
            "num_attention_heads": num_heads,
            "num_key_value_heads": max(1, num_heads // 2),
            "max_position_embeddings": 512,
            "rope_scaling": {"type": "mrope", "mrope_section": _mrope_section(hidden_size // num_heads)},
            "bos_token_id": None,
            "eos_token_id": vocab["<|im_end|>"],
            "pad_token_id": vocab["<|endoftext|>"],
            "tie_word_embeddings": False,
        },
        vision_config={
            "depth": vision_depth,
            "hidden_size": hidden_size,
            "intermediate_size": hidden_size * 2,
            "num_heads": vision_heads,
            "out_hidden_size": hidden_size,
            "fullatt_block_indexes": list(range(vision_depth)),
        },
        image_token_id=vocab["<|image_pad|>"],
        video_token_id=vocab["<|video_pad|>"],
        vision_start_token_id=vocab["<|vision_start|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    for p in model.parameters():  # 0.5: wider than the default init, so answers depend strongly on weights and images
        torch.nn.init.normal_(p, std=init_std)
    if dtype is not None:
        model.to(getattr(torch, dtype))
    model.save_pretrained(out)
    return out


def _mrope_section(head_dim: int) -> list[int]:
    """Qwen2.5-VL's rotary split over (time, height, width), summing to `head_dim / 2`.

    [1, 1, 2] for a head size of 8; [16, 24, 24] for 128, the released models' split.
    """
    if head_dim % 2 or head_dim < 8:
        raise ValueError(f"build_tiny_vlm: head size {head_dim} (hidden_size / num_heads) must be even and >= 8")
    half = head_dim // 2
    t = half // 4
    h = (half - t) // 2
    return [t, h, half - t - h]


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
