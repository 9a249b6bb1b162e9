"""Generate docs/omni/config_reference.md from the dataclasses of the `diffusion_trainer` config.

python .ci/gen_config_reference.py           # rewrite the page
python .ci/gen_config_reference.py --check   # exit 1 when the page is stale (the docs session and a test run it)
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import pathlib
import re
import sys
import typing
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "omni" / "config_reference.md"
_ENTRY = re.compile(r"^(?P<names>[A-Za-z_][\w]*(?:, [A-Za-z_][\w]*)*)(?: \((?P<type>.*?)\))?: (?P<text>.*)$")

HEADER = """# Configuration reference

Every key of the `diffusion_trainer` config (`verl_omni/trainer/config/diffusion_trainer.yaml`), by section: its
type, its default and what it does. Generated from the config dataclasses by `.ci/gen_config_reference.py`; do not
edit by hand (`nox -s docs` fails when this page is stale). Override any key on the command line:
`verl-omni-train actor_rollout_ref.rollout.n=16 trainer.total_training_steps=300`.

Keys of verl-omni's schema that are not listed here belong to features this project does not implement: set to
verl-omni's default (the feature off) they are accepted and ignored; set to anything else they are rejected with a
message naming the key and the feature.
"""


def arg_docs(cls: type) -> dict[str, str]:
    """`name -> description` from the `Args:` section of a class docstring (Google style)."""
    doc = inspect.getdoc(cls) or ""
    lines = doc.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "Args:") + 1
    except StopIteration:
        return {}
    body = [line for line in lines[start:]]
    indent = next((len(line) - len(line.lstrip()) for line in body if line.strip()), 0)
    out: dict[str, str] = {}
    current: list[str] = []
    for line in body:
        if not line.strip():
            continue
        level = len(line) - len(line.lstrip())
        if level < indent:
            break
        if level == indent:
            match = _ENTRY.match(line.strip())
            if match is None:
                current = []
                continue
            current = match.group("names").split(", ")
            for name in current:
                out[name] = match.group("text").strip()
        elif current:
            for name in current:
                out[name] += " " + line.strip()
    return out


def _show(value: Any) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if dataclasses.is_dataclass(value):
        return "(section)"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def _type(annotation: Any) -> str:
    from verl_core.config.typecheck import type_name

    return type_name(annotation).replace("|", "\\|")


def sections(instance: Any, path: str) -> list[tuple[str, type, list[tuple[str, str, str, str]]]]:
    """One `(path, class, rows)` per config node, depth first; rows are `(key, type, default, description)`."""
    cls = type(instance)
    docs = arg_docs(cls)
    hints = typing.get_type_hints(cls)
    rows, children = [], []
    for field in dataclasses.fields(cls):
        if field.name.startswith("_"):
            continue
        value = getattr(instance, field.name)
        if dataclasses.is_dataclass(value):
            children.append((field.name, value))
            continue
        text = docs.get(field.name, "").replace("|", "\\|")
        rows.append((field.name, _type(hints[field.name]), _show(value), text))
    out = [(path, cls, rows)] if rows else []
    for name, value in children:
        out += sections(value, f"{path}.{name}" if path else name)
    return out


def render() -> str:
    """The whole page."""
    from verl_omni.trainer.config import DiffusionTrainerConfig

    parts = [HEADER]
    for path, cls, rows in sections(DiffusionTrainerConfig(), ""):
        summary = (inspect.getdoc(cls) or "").splitlines()[0]
        parts.append(f"## `{path}`\n\n`{cls.__module__}.{cls.__qualname__}`: {summary}\n")
        parts.append("| key | type | default | description |\n|---|---|---|---|")
        parts += [f"| `{key}` | {typ} | {default} | {text} |" for key, typ, default, text in rows]
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page differs from the dataclasses")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is stale: run `python .ci/gen_config_reference.py`", file=sys.stderr)
            return 1
        print(f"{OUT.relative_to(ROOT)} is up to date")
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
