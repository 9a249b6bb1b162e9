"""Migrate, for one run, a user's Hydra config folder: the primary config and the group files it composes from it.

`python -m verl.trainer.main_flowgrpo --config-path DIR --config-name NAME` (verl-compat) runs a pre-#6200 config
of the user's own. The same rules as `verl-migrate-config` (`migrate_yaml_text`) rewrite `DIR/NAME.yaml` and each
file its defaults list composes from `DIR` (`group@package: option` -> `DIR/group/option.yaml`, a plain entry ->
`DIR/entry.yaml`) into another folder; the user's files are only read. Old verl's groups are gone from the
migrated defaults list (the migrated primary extends the installed `diffusion_trainer`), so a group file of the
user's that old verl composed is listed again, after `diffusion_trainer` and before the primary's own keys, as in
old verl's order. The documents are migrated as written for old verl (`legacy=True`), so old defaults the user relied
on are written into them (`lora_rank: 32`), as for launch-script overrides.

Not followed: entries whose option is an interpolation (old verl's `${model_engine}_actor`), and the defaults lists
of group files (old verl's group files layered on verl's own groups, which the migration drops). A
`diffusion_trainer.yaml` in `DIR` other than the primary is not copied: `- diffusion_trainer` means the installed
config.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Any

from verl_migrate import yaml_io
from verl_migrate.files import read_text
from verl_migrate.report import FileReport

__all__ = ["MigratedConfigDir", "migrate_config_dir"]

#: the installed root config a migrated primary extends
ROOT = "diffusion_trainer"


@dataclasses.dataclass
class MigratedConfigDir:
    """What `migrate_config_dir` did.

    Args:
        config_name (`str`): the primary's name in the output folder (`NAME`, or `NAME_migrated` when `NAME` is
            `diffusion_trainer`, which would otherwise shadow the installed config it now extends).
        changed (`list[str]`): the user's files (paths under `DIR`) the rules rewrote; empty: nothing to migrate.
        reports (`list[FileReport]`): one report per migrated file, named by its path under `DIR`, without the
            findings this module resolves (the name clash with `diffusion_trainer`, group files to list again).
    """

    config_name: str
    changed: list[str]
    reports: list[FileReport]


def _entries(data: Any) -> list[tuple[str | None, str | None, str]]:
    """`(group, package, option)` of a defaults list's entries naming a file: `(None, None, name)` for a plain one."""
    seq = data.get("defaults") if isinstance(data, dict) else None
    out: list[tuple[str | None, str | None, str]] = []
    for item in seq if isinstance(seq, list) else []:
        if isinstance(item, str) and item != "_self_":
            out.append((None, None, item))
        elif isinstance(item, dict) and len(item) == 1:
            ((name, option),) = item.items()
            group, _, package = str(name).removeprefix("override ").strip().partition("@")
            if isinstance(option, str) and "${" not in option:
                out.append((group, package or None, option))
    return out


def _composed(folder: str, name: str, text: str) -> list[tuple[str, str | None, tuple[str, str | None, str] | None]]:
    """Files of `folder` the primary composes: `(relative path, package, group entry or None)`."""
    found: list[tuple[str, str | None, tuple[str, str | None, str] | None]] = []
    for group, package, option in _entries(yaml_io.load(text, name)):
        if group is None:
            rel = f"{option}.yaml"
            if option != ROOT and os.path.isfile(os.path.join(folder, rel)):
                found.append((rel, None, None))
        else:
            rel = os.path.join(group, f"{option}.yaml")
            if os.path.isfile(os.path.join(folder, rel)):
                found.append((rel, package, (group, package, option)))
    return found


def _relist(text: str, path: str, entries: list[tuple[str, str | None, str]]) -> str:
    """Add the group `entries` the migration dropped to the migrated primary's defaults, after `diffusion_trainer`."""
    data = yaml_io.load(text, path)
    seq = data.get("defaults") if isinstance(data, dict) else None
    if not isinstance(seq, list):
        return text
    from ruamel.yaml.comments import CommentedMap

    have = {str(next(iter(i))).removeprefix("override ").strip() for i in seq if isinstance(i, dict) and len(i) == 1}
    at = seq.index(ROOT) + 1 if ROOT in seq else 0
    for group, package, option in entries:
        name = f"{group}@{package}" if package else group
        if name not in have:
            item = CommentedMap()
            item[name] = option
            seq.insert(at, item)
            at += 1
    return yaml_io.dump(data, text)


def _resolved_here(finding: Any) -> bool:
    """Whether a finding asks for what this module does: another name or folder, the group file listed again."""
    if finding.rule_id == "root-defaults-complete" and finding.path == "defaults" and finding.category == "warning":
        return True  # the primary is written under another name, and no `diffusion_trainer.yaml` is copied
    return finding.rule_id == "group-file-defaults" and "no longer layers on" in finding.message


def migrate_config_dir(config_dir: str, config_name: str, out_dir: str) -> MigratedConfigDir | None:
    """Migrate the primary config `config_dir/config_name.yaml` and the files it composes from `config_dir`.

    When a file changes, every YAML file of `config_dir` (but a `diffusion_trainer.yaml` that is not the primary) is
    copied to `out_dir` and the migrated files are written over their copies: run with `--config-path out_dir
    --config-name <result.config_name>`. Nothing under `config_dir` is written.

    Args:
        config_dir (`str`): the user's config folder (`--config-path`).
        config_name (`str`): the primary config's name (`--config-name`, with or without `.yaml`).
        out_dir (`str`): an existing folder the caller owns (and removes).

    Returns:
        `MigratedConfigDir`, or None when `config_dir` holds no such primary (the installed config is meant).

    Raises:
        MigrationError: a file is not valid YAML, or the rules refuse it (conflicting old and new keys), naming
            the file.
        ValueError: `out_dir` is `config_dir`.
    """
    from verl_migrate.migrate import migrate_yaml_text

    folder = os.path.abspath(os.path.expanduser(config_dir))
    if os.path.realpath(out_dir) == os.path.realpath(folder):
        raise ValueError(f"out_dir {out_dir!r} is the config folder itself; the user's files are never written")
    name = config_name.removesuffix(".yaml")
    primary = f"{name}.yaml"
    if not os.path.isfile(os.path.join(folder, primary)):
        return None
    text = read_text(os.path.join(folder, primary))
    todo = [(primary, None, None), *_composed(folder, primary, text)]
    new_texts: dict[str, str] = {}
    reports: list[FileReport] = []
    for rel, package, _ in todo:
        old = text if rel == primary else read_text(os.path.join(folder, rel))
        new, report = migrate_yaml_text(old, rel, package=package, legacy=True)
        report.path = os.path.join(config_dir, rel)
        report.findings = [f for f in report.findings if not _resolved_here(f)]
        reports.append(report)
        if report.changed:
            new_texts[rel] = new
    out_name = f"{name}_migrated" if name == ROOT else name
    if not new_texts:
        return MigratedConfigDir(config_name=name, changed=[], reports=reports)
    groups = [entry for _, _, entry in todo if entry is not None]
    new_texts[primary] = _relist(new_texts.get(primary, text), primary, groups)
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for file in files:
            rel = os.path.relpath(os.path.join(root, file), folder)
            if rel.endswith((".yaml", ".yml")) and rel != f"{ROOT}.yaml":
                os.makedirs(os.path.dirname(os.path.join(out_dir, rel)), exist_ok=True)
                shutil.copyfile(os.path.join(root, file), os.path.join(out_dir, rel))
    for rel, new in new_texts.items():
        dst = os.path.join(out_dir, f"{out_name}.yaml" if rel == primary else rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "w", encoding="utf-8") as fh:
            fh.write(new)
    return MigratedConfigDir(config_name=out_name, changed=[r.path for r in reports if r.changed], reports=reports)
