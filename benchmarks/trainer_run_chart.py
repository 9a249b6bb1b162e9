"""PNG chart of `bench_trainer_run.py` results, drawn with Pillow (no matplotlib needed on the GPU image).

Left: images/s end to end per trainer variant and the baseline. Right: the median seconds per step, stacked by
stage. Redraw from a saved JSON: `stage_chart(json.load(open(path)), png_path)`.
"""

from __future__ import annotations

import pathlib
from typing import Any

COLORS = [
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
]  # fmt: skip
W, H, TOP, BOTTOM = 1100, 520, 50, 90  # canvas and the plot area's margins


def _font(size: int) -> Any:
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def _rows(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    rows = [(k, v) for k, v in results["variants"].items() if "images_per_s" in v]
    base = results.get("baseline") or {}
    if "images_per_s" in base:
        rows.append(("baseline (flow_grpo-style)", base))
    return rows


def _bars(draw, x0: int, x1: int, rows, values, *, stacks=None, label: str, fmt: str) -> None:
    """Vertical bars in [x0, x1]; `stacks[i]` = [(stage, seconds)] draws bar i stacked."""
    font = _font(13)
    top = max(max(values), 1e-9) * 1.15
    y0, y1 = TOP, H - BOTTOM
    draw.line([(x0, y0), (x0, y1), (x1, y1)], fill="black")
    draw.text((x0 - 10, y0 - 25), label, fill="black", font=font)
    slot = (x1 - x0) / len(rows)
    for i, ((name, _), value) in enumerate(zip(rows, values, strict=True)):
        left, right = x0 + i * slot + slot * 0.2, x0 + (i + 1) * slot - slot * 0.2
        parts = stacks[i] if stacks else [("", value)]
        base = 0.0
        for stage, sec in parts:
            ya, yb = y1 - (base + sec) / top * (y1 - y0), y1 - base / top * (y1 - y0)
            color = COLORS[_STAGE_INDEX.setdefault(stage, len(_STAGE_INDEX)) % len(COLORS)] if stage else COLORS[0]
            draw.rectangle([left, ya, right, yb], fill=color)
            base += sec
        draw.text(((left + right) / 2, y1 - value / top * (y1 - y0) - 4), fmt.format(value), fill="black",
                  font=font, anchor="md")  # fmt: skip
        label = _wrap(draw, name, font, slot * 0.95)
        draw.multiline_text(((left + right) / 2, y1 + 6), label, fill="black", font=font, anchor="ma", align="center")


def _wrap(draw, name: str, font, width: float) -> str:
    """`name` broken before `+` and at spaces into lines no wider than `width` (where a piece allows)."""
    pieces = name.replace("+", " +").split(" ")
    lines = [pieces[0]]
    for piece in pieces[1:]:
        joined = lines[-1] + ("" if piece.startswith("+") else " ") + piece
        if draw.textlength(joined, font=font) <= width:
            lines[-1] = joined
        else:
            lines.append(piece)
    return "\n".join(lines)


_STAGE_INDEX: dict[str, int] = {}


def stage_chart(results: dict[str, Any], path: pathlib.Path) -> pathlib.Path | None:
    """Write the chart to `path`; None when no run has figures."""
    from PIL import Image, ImageDraw

    rows = _rows(results)
    _STAGE_INDEX.clear()
    if not rows:
        return None
    image = Image.new("RGB", (W, H), "white")
    draw = ImageDraw.Draw(image)
    title = (f"verl-omni-train, workload {results['preset']}, {results.get('machine', '?')}, "
             f"{results['images_per_step']} images/step")  # fmt: skip
    draw.text((W / 2, 8), title, fill="black", font=_font(16), anchor="ma")
    _bars(draw, 60, 420, rows, [r["images_per_s"] for _, r in rows], label="images / s (end to end)", fmt="{:.2f}")
    stacks = [[(k, v) for k, v in r["stage_s"].items() if v > 0] for _, r in rows]
    _bars(draw, 500, 880, rows, [sum(v for _, v in s) for s in stacks], stacks=stacks,
          label="seconds per step (median), by stage", fmt="{:.2f}")  # fmt: skip
    font = _font(13)
    for j, (stage, idx) in enumerate(_STAGE_INDEX.items()):
        y = TOP + 18 * j
        draw.rectangle([900, y, 912, y + 12], fill=COLORS[idx % len(COLORS)])
        draw.text((918, y), stage, fill="black", font=font)
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)
    return path
