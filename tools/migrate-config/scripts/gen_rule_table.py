"""Generate the rule tables and examples of docs/migration/config.md from the rule data.

The page keeps hand-written prose; the blocks between `<!-- BEGIN GENERATED: name -->` and
`<!-- END GENERATED: name -->` are produced here. `--check` exits 1 when the committed page is out of date.

Usage: python tools/migrate-config/scripts/gen_rule_table.py [--check]
"""

from __future__ import annotations

import difflib
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
PAGE = os.path.join(ROOT, "docs", "migration", "config.md")
GOLDEN = os.path.join(HERE, "..", "tests", "golden")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def rule_table() -> str:
    """Return the Markdown table of every registered rule."""
    from verl_migrate.rules import all_rules

    lines = ["| id | kind | since | effect | why |", "|---|---|---|---|---|"]
    for r in sorted(all_rules(), key=lambda r: r.id):
        lines.append(f"| `{r.id}` | {r.kind} | {r.since} | {_cell(r.describe())} | {_cell(r.summary)} |")
    return "\n".join(lines)


def coverage_table() -> str:
    """Return which rule ids implement each row of legacy_surface.md §3.4."""
    from verl_migrate.rules import all_rules
    from verl_migrate.rules._coverage import ROW_COUNT, UNCHANGED_ROWS

    lines = ["| row | rule ids |", "|---|---|"]
    for row in range(1, ROW_COUNT + 1):
        ids = sorted(r.id for r in all_rules() if row in r.refs)
        cell = ", ".join(f"`{i}`" for i in ids) if ids else f"no rewrite: {UNCHANGED_ROWS[row]}"
        lines.append(f"| {row} | {_cell(cell)} |")
    return "\n".join(lines)


def _read(name: str) -> str:
    with open(os.path.join(GOLDEN, name), encoding="utf-8") as fh:
        return fh.read()


def examples() -> str:
    """Return before/after examples: the tool's output for two golden inputs, for this project's trainer config."""
    from verl_migrate import migrate_script_text, migrate_yaml_text

    partial_before = _read("partial_with_defaults.yaml")
    partial_after, _ = migrate_yaml_text(partial_before, "partial.yaml")
    script = _read("run_qwen_image_ocr_lora.sh")
    script_diff = "".join(
        difflib.unified_diff(
            script.splitlines(True),
            migrate_script_text(script, "run_qwen_image_ocr_lora.sh")[0].splitlines(True),
            fromfile="run_qwen_image_ocr_lora.sh",
            tofile="run_qwen_image_ocr_lora.sh (migrated)",
            n=0,
        )
    )
    return "\n".join(
        [
            "### A partial config with a defaults list",
            "",
            "Before:",
            "",
            "```yaml",
            partial_before.rstrip("\n"),
            "```",
            "",
            "After `verl-migrate-config partial.yaml`:",
            "",
            "```yaml",
            partial_after.rstrip("\n"),
            "```",
            "",
            "### The old Qwen-Image OCR LoRA launch script",
            "",
            "```diff",
            script_diff.rstrip("\n"),
            "```",
        ]
    )


BLOCKS = {"rule-table": rule_table, "row-coverage": coverage_table, "examples": examples}


def render(page: str) -> str:
    """Return `page` with every generated block refreshed."""
    for name, fn in BLOCKS.items():
        pattern = re.compile(rf"(<!-- BEGIN GENERATED: {name} -->\n)(?:.*?\n)?(<!-- END GENERATED: {name} -->)", re.S)
        if not pattern.search(page):
            raise SystemExit(f"{PAGE}: marker block {name!r} is missing")
        page = pattern.sub(lambda m, fn=fn: m.group(1) + fn() + "\n" + m.group(2), page)
    return page


def main(argv: list[str] | None = None) -> int:
    """Rewrite the page, or with `--check` report whether it is up to date."""
    argv = sys.argv[1:] if argv is None else argv
    with open(PAGE, encoding="utf-8") as fh:
        page = fh.read()
    new = render(page)
    if "--check" in argv:
        if new != page:
            print(f"{PAGE} is out of date; run python tools/migrate-config/scripts/gen_rule_table.py", file=sys.stderr)
            return 1
        return 0
    if new != page:
        with open(PAGE, "w", encoding="utf-8") as fh:
            fh.write(new)
        print(f"updated {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
