"""Write a small OCR prompt set: `train.parquet` and `test.parquet` with `prompt`, `ground_truth`, `data_source`.

The OCR recipe (`run_qwen_image_ocr_lora.sh`) trains Qwen-Image to render a requested text; its reward model reads
the text back and the `ocr` reward scores it against `ground_truth`. verl's own data
(`examples/flowgrpo_trainer/data_process/qwenimage_ocr.py`, Flow-GRPO's OCR set) cannot be downloaded here, so this
script writes prompts of the same form from a fixed word list, seeded: each row asks for an image showing a short
text in quotes, and `ground_truth` is that text. Columns: `prompt`, `ground_truth`,
`data_source` (`flow_grpo/ocr`, as verl's script emits), `extra_info` (`{"index": i}`).

    python examples/ocr/make_ocr_dataset.py --local_save_dir ~/data/ocr --train_size 64 --val_size 8
"""

from __future__ import annotations

import argparse
import pathlib
import random

WORDS = (
    "OPEN", "CLOSED", "SALE", "EXIT", "COFFEE", "BAKERY", "HOTEL", "GARDEN", "MUSEUM", "LIBRARY", "STATION",
    "HELLO", "WELCOME", "DANGER", "QUIET", "FRESH", "BOOKS", "MUSIC", "PIZZA", "TAXI", "PHARMACY", "CINEMA",
)  # fmt: skip
SCENES = (
    "a neon sign on a brick wall that says",
    "a wooden shop sign reading",
    "a chalkboard menu with the words",
    "a street banner printed with",
    "a coffee mug with the text",
    "a poster in bold letters saying",
)
DATA_SOURCE = "flow_grpo/ocr"


def make_rows(size: int, seed: int) -> list[dict]:
    """`size` OCR rows drawn with `random.Random(seed)`: a scene asking for one or two words in quotes."""
    rng = random.Random(seed)
    rows = []
    for i in range(size):
        text = " ".join(rng.sample(WORDS, rng.choice((1, 2))))
        rows.append(
            {
                "prompt": f'{rng.choice(SCENES)} "{text}"',
                "ground_truth": text,
                "data_source": DATA_SOURCE,
                "extra_info": {"index": i},
            }
        )
    return rows


def write_dataset(out_dir: str | pathlib.Path, train_size: int = 64, val_size: int = 8, seed: int = 0) -> dict:
    """Write `train.parquet` and `test.parquet` under `out_dir`; return their paths (`{"train": ..., "test": ...}`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if train_size < 1 or val_size < 1:
        raise ValueError(f"train_size and val_size must be >= 1, got {train_size} and {val_size}")
    out = pathlib.Path(out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, size, split_seed in (("train", train_size, seed), ("test", val_size, seed + 1)):
        path = out / f"{split}.parquet"
        pq.write_table(pa.Table.from_pylist(make_rows(size, split_seed)), path)
        paths[split] = path
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local_save_dir", default="~/data/ocr", help="output folder (default: ~/data/ocr)")
    parser.add_argument("--train_size", type=int, default=64)
    parser.add_argument("--val_size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    paths = write_dataset(args.local_save_dir, args.train_size, args.val_size, args.seed)
    print(f"wrote {paths['train']} ({args.train_size} rows) and {paths['test']} ({args.val_size} rows)")


if __name__ == "__main__":
    main()
