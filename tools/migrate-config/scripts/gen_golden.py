"""Regenerate the golden fixtures of tests/golden/.

`old_full_dump.yaml` is rebuilt from the old verl key list shipped in verl_migrate/data (571 keys with their
defaults, the shape of verl's `_generated_diffusion_trainer.yaml`); every `<name>.migrated.<ext>` is the tool's
output for `<name>.<ext>`, migrated for upstream verl-omni's frozen tree (`verl_migrate.upstream.pinned`, as the
golden tests run) so the snapshots do not move with this project's config. Review the diff before committing.

Usage: python tools/migrate-config/scripts/gen_golden.py
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "tests", "golden")
INPUTS = (
    "old_full_dump.yaml",
    "partial_with_defaults.yaml",
    "run_qwen_image_ocr_lora.sh",
    "run_flowgrpo_trainer_diffusers.sh",
)


def full_dump_text() -> str:
    """Return the old composed config as nested YAML, keys in the order of the key list."""
    from verl_migrate.keys import old_defaults

    tree: dict = {}
    for key, value in old_defaults().items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    lines = ["# verl (460ccf3c2) _generated_diffusion_trainer.yaml, rebuilt from the flattened key list (571 keys)."]

    def emit(node: dict, indent: int) -> None:
        for k, v in node.items():
            if isinstance(v, dict):
                lines.append(" " * indent + f"{k}:")
                emit(v, indent + 2)
            else:
                lines.append(" " * indent + f"{k}: {v}")

    emit(tree, 0)
    return "\n".join(lines) + "\n"


def migrated_name(name: str) -> str:
    """Return `x.migrated.yaml` for `x.yaml`."""
    stem, ext = os.path.splitext(name)
    return f"{stem}.migrated{ext}"


def main() -> int:
    """Write the fixtures."""
    from verl_migrate import migrate_script_text, migrate_yaml_text
    from verl_migrate.upstream import pinned

    with pinned():
        return _write(migrate_script_text, migrate_yaml_text)


def _write(migrate_script_text, migrate_yaml_text) -> int:
    with open(os.path.join(GOLDEN, "old_full_dump.yaml"), "w", encoding="utf-8") as fh:
        fh.write(full_dump_text())
    for name in INPUTS:
        with open(os.path.join(GOLDEN, name), encoding="utf-8") as fh:
            text = fh.read()
        run = migrate_script_text if name.endswith(".sh") else migrate_yaml_text
        out, _ = run(text, name)
        with open(os.path.join(GOLDEN, migrated_name(name)), "w", encoding="utf-8") as fh:
            fh.write(out)
        print("wrote", migrated_name(name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
