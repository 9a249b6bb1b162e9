"""Built-in prompt sets addressed as `builtin://<name>` in `data.train_files` / `data.val_files`.

They let the quickstart run with no dataset files at all. Every row carries `data_source`
`jpeg_compressibility`, so the built-in scorer of `verl_omni.reward` scores it without a custom reward
function. The prompts were written for this project: short, everyday scenes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BUILTIN_PREFIX", "BUILTIN_PROMPT_SETS", "builtin_rows"]

BUILTIN_PREFIX = "builtin://"

_QUICKSTART = (
    "a red apple on a wooden table",
    "a lighthouse on a rocky coast at dusk",
    "a cat sleeping on a windowsill",
    "a bowl of ramen with a boiled egg",
    "a snowy mountain above a pine forest",
    "a yellow taxi on a rainy street",
    "a hot air balloon over green hills",
    "a cup of coffee next to an open book",
    "a sailboat on a calm blue lake",
    "a bicycle leaning against a brick wall",
    "a field of sunflowers under a clear sky",
    "an old steam train crossing a bridge",
    "a golden retriever running on a beach",
    "a glass of orange juice in the morning light",
    "a wooden cabin in a snowy valley",
    "a street market with colorful umbrellas",
    "a desert road leading to red cliffs",
    "an owl perched on a mossy branch",
    "a plate of pancakes with blueberries",
    "a city skyline reflected in a river",
    "a paper lantern glowing at night",
    "a vase of tulips on a kitchen counter",
    "a fox walking through autumn leaves",
    "a stack of smooth river stones",
    "a small robot watering a plant",
    "a castle on a hill above the clouds",
    "a bright green parrot on a palm leaf",
    "a child's drawing of a house and a sun",
    "a jellyfish drifting in dark water",
    "a bakery window full of bread",
    "a quiet library with tall shelves",
    "a rowing boat tied to a wooden pier",
)

_QUICKSTART_VAL = (
    "a white teapot on a blue tablecloth",
    "a penguin standing on an ice floe",
    "a windmill in a tulip field",
    "a lemon tree in a terracotta pot",
    "a mountain lake at sunrise",
    "a vintage camera on a desk",
    "a giraffe under an acacia tree",
    "a snowman wearing a red scarf",
)

BUILTIN_PROMPT_SETS: dict[str, tuple[str, ...]] = {
    "quickstart": _QUICKSTART,
    "quickstart_val": _QUICKSTART_VAL,
}
"""Name -> prompts of each built-in set (`builtin://quickstart`: 32 prompts, `builtin://quickstart_val`: 8)."""


def builtin_rows(name: str, *, key: str) -> list[dict[str, Any]]:
    """Rows of the built-in set `name` in the layout of verl's parquet files.

    Args:
        name (`str`): the set name, without the `builtin://` prefix.
        key (`str`): the config key the name came from, for the error message.

    Returns:
        One dict per prompt with `prompt`, `data_source` (`"jpeg_compressibility"`), `reward_model`
        (`{"style": "rule", "ground_truth": ""}`) and `extra_info` (`{"split": name, "index": i}`).

    Raises:
        ValueError: `name` is not a built-in set (the message lists the known ones).
    """
    prompts = BUILTIN_PROMPT_SETS.get(name)
    if prompts is None:
        known = ", ".join(BUILTIN_PREFIX + n for n in BUILTIN_PROMPT_SETS)
        raise ValueError(f"{key}: unknown built-in prompt set {BUILTIN_PREFIX + name!r}; known: {known}")
    return [
        {
            "prompt": p,
            "data_source": "jpeg_compressibility",
            "reward_model": {"style": "rule", "ground_truth": ""},
            "extra_info": {"split": name, "index": i},
        }
        for i, p in enumerate(prompts)
    ]
