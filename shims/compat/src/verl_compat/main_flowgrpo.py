"""`python -m verl.trainer.main_flowgrpo <old Hydra overrides>`: the old launch command, run by verl-omni.

The overrides are translated by verl-migrate-config's rules (`translate_overrides`), the translation is printed
once (to stderr), overrides that no longer mean anything are reported (never dropped silently), and then
verl-omni's trainer (`verl-omni-train` = `python -m verl_omni.trainer.main_diffusion`, the module
`verl-migrate-config --script` writes into launch scripts) trains. `--config-path` / `--config-name` flags pass
through unchanged.

Served under the old name `verl.trainer.main_flowgrpo`: its other old names (`TaskRunner`, `run_flowgrpo`) have no
counterpart and raise verl-compat's `NotProvidedError` (an ImportError) with the mapping's reason.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "translate_argv"]

NEW_MODULE = "verl_omni.trainer.main_diffusion"  # = verl_migrate.target.ENTRY_MODULE, what migrated scripts run
NEW_COMMAND = f"python -m {NEW_MODULE}"
NEW_CONSOLE = "verl-omni-train"  # the console script of the same trainer
OLD_MODULE = "verl.trainer.main_flowgrpo"
DEFAULT_CONFIG = "diffusion_trainer"  # old verl's Hydra config of `main_flowgrpo` (the one its defaults belong to)
_ATTENTION = ("semantic", "unknown", "obsolete", "not-implemented", "warning")
#: rules whose rewrite of an override assumes old verl's diffusion_trainer values (skipped on another config)
_CONFIG_DEPENDENT = ("sde-window-range-without-size",)


def __getattr__(name: str) -> Any:
    """Old names of `verl.trainer.main_flowgrpo` not defined here: served or refused as the mapping says."""
    if __name__ == OLD_MODULE:
        from verl_compat import _serve

        if name in _serve.table().name_rows().get(OLD_MODULE, {}):
            return _serve.serve_name(OLD_MODULE, name, 2)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _schema_has(path: str) -> bool:
    """Whether `path` (dotted) is a setting of verl-omni's trainer config (a dataclass field, or below a dict)."""
    import dataclasses
    import typing

    from verl_omni.trainer.config import DiffusionTrainerConfig

    cls: Any = DiffusionTrainerConfig
    for part in path.split("."):
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            return True  # below a dict / Any field: free-form
        hints = typing.get_type_hints(cls)
        if part == "_target_":
            return True
        if part not in hints:
            return False
        hint = hints[part]
        cls = next((a for a in (typing.get_args(hint) or (hint,)) if isinstance(a, type)), hint)
    return True


def _old_keys() -> set[str]:
    """The keys of the old (pre-#6200) composed diffusion_trainer config, from verl-migrate-config's data."""
    from importlib.resources import files

    text = files("verl_migrate").joinpath("data/old_diffusion_trainer.flat.txt").read_text(encoding="utf-8")
    return {line.split(" = ", 1)[0].strip() for line in text.splitlines() if line and not line.startswith("#")}


def drop_meaningless(overrides: list[str]) -> tuple[list[str], list[str]]:
    """Split translated overrides into (kept, dropped).

    Dropped: old verl keys that verl-omni's trainer has no setting for.
    Keys that never existed in old verl stay, so a typo still fails in the trainer with its "did you mean".
    """
    old = _old_keys()
    kept, dropped = [], []
    for word in overrides:
        key = word.split("=", 1)[0].lstrip("+~")
        if "=" in word and key.lstrip("+") in old and not _schema_has(key):
            dropped.append(word)
        else:
            kept.append(word)
    return kept, dropped


_NAME_FLAGS = ("--config-name", "-cn")
_PATH_FLAGS = ("--config-path", "-cp")


def _flag(flags: Sequence[str], names: tuple[str, ...]) -> str | None:
    """The value of the flag `names` among `flags` (`NAME VALUE` or `NAME=VALUE`); None when not given."""
    for i, word in enumerate(flags):
        flag, eq, value = word.partition("=")
        if flag in names:
            return value if eq else (flags[i + 1] if i + 1 < len(flags) else None)
    return None


def _config_name(flags: Sequence[str]) -> str | None:
    """The value of `--config-name` / `-cn` among `flags`; None when not given."""
    return _flag(flags, _NAME_FLAGS)


def _set_flag(flags: list[str], names: tuple[str, ...], value: str) -> list[str]:
    """`flags` with the flag `names` set to `value` (replaced where given, else appended as `names[0] value`)."""
    out = list(flags)
    for i, word in enumerate(out):
        flag, eq, _ = word.partition("=")
        if flag in names:
            if eq:
                out[i] = f"{flag}={value}"
            elif i + 1 < len(out):
                out[i + 1] = value
            return out
    return [*out, names[0], value]


def _migrate_config_files(flags: list[str], workdir: str | None) -> tuple[list[str], list[str], bool]:
    """Migrate the user's config files that `--config-path` / `--config-name` select (verl_migrate.configdir).

    Returns (flags pointing at the migrated copies, report lines, whether a config file of the user's is the primary
    config). The migrated files go to `workdir` (a new temporary folder, removed at exit, when None).
    """
    path = _flag(flags, _PATH_FLAGS)
    if path is None:
        return flags, [], False
    import tempfile

    from verl_migrate.configdir import migrate_config_dir

    name = _config_name(flags) or DEFAULT_CONFIG
    if workdir is None:
        import atexit
        import shutil

        workdir = tempfile.mkdtemp(prefix="verl_compat_config_")
        atexit.register(shutil.rmtree, workdir, True)
    result = migrate_config_dir(path, name, workdir)
    if result is None:
        return flags, [], False
    if not result.changed:
        return flags, [], True
    flags = _set_flag(_set_flag(flags, _PATH_FLAGS, workdir), _NAME_FLAGS, result.config_name)
    lines = [
        f"verl-compat: deprecated: old (pre-#6200) config files, migrated for this run by verl-migrate-config's rules "
        f"into a temporary folder (yours are not changed): {', '.join(result.changed)}; migrate them with "
        "`verl-migrate-config` (docs/migration/config.md)"
    ]
    for report in result.reports:
        if report.changed:
            count = (
                f"verl-compat: {report.path}: {len(report.changes)} changes (`verl-migrate-config --diff` shows them)"
            )
            lines.extend([count, *_report_lines(report, None)])
    return flags, lines, True


def _report_lines(report: Any, header: str | None) -> list[str]:
    """The changes of a verl-migrate-config report under `header` (None: not listed), then what a user should read."""
    lines = []
    if report.changes and header is not None:
        lines.append(header)
        lines.extend(
            "  " + line
            for line in report.to_text().splitlines()[1:]
            if not line.lstrip().startswith(tuple(f"{c}:" for c in ("note", *_ATTENTION)))
        )
    attention = [f for f in report.findings if f.category in _ATTENTION]
    if attention:
        lines.append("verl-compat: settings that no longer mean the same thing (read these):")
        lines.extend(f"  {f.category}: {f.path}: {f.message}" for f in attention)
    return lines


def _hold_back_old_defaults(
    words: list[str], report: Any, config_name: str, users_file: bool = False
) -> tuple[list[str], list[str]]:
    """Take the old defaults the rules made explicit (`set-default`) out of `words` and `report`.

    Old verl's defaults belong to its `diffusion_trainer` config; another config (the quickstart, a user's own file)
    sets its own values, which an appended old default would override. Returns (words, note lines).
    """
    held = {c.path: c for c in report.changes if c.action == "set-default"}
    if not held:
        return words, []
    report.changes = [c for c in report.changes if c.action != "set-default"]
    report.findings = [f for f in report.findings if not (f.path in held and f.rule_id == held[f.path].rule_id)]
    kept, notes = [], []
    for word in words:
        change = held.get(word.partition("=")[0].lstrip("+~"))
        if change is None:
            kept.append(word)
        else:
            notes.append(f"  note: {word} — {change.note}")
    if users_file:  # its migration wrote the old defaults it relied on into it
        return kept, [
            f"verl-compat: note: old verl's defaults are kept in your config `{config_name}` where it relied on them, "
            "not passed as overrides over its values"
        ]
    head = (
        f"verl-compat: note: `--config-name {config_name}` is not old verl's `{DEFAULT_CONFIG}`, so old verl's "
        "defaults are not written over its values; add these overrides to keep old verl's behaviour:"
    )
    return kept, [head, *notes]


def translate_argv(argv: Sequence[str], *, workdir: str | None = None) -> tuple[list[str], str]:
    """Old argv -> (verl-omni argv, the printed translation report).

    Flags (words starting with `-`, with their value when given as a separate word) are kept as they are and
    put first; every other word is a Hydra override translated by verl-migrate-config. Old defaults that the
    rules make explicit (e.g. `lora_rank=32`) are passed on only for old verl's default config
    (`diffusion_trainer`, also when no `--config-name` is given, and not a file of the user's); for any other
    config they are listed as notes. A config of the user's (`--config-path DIR`) and the files it composes from
    `DIR` are migrated by the same rules into `workdir` (see `_migrate_config_files`); the flags then point there.
    """
    from verl_migrate.migrate import translate_overrides

    flags: list[str] = []
    overrides: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("--cfg", "-c") and i + 1 < len(words) and words[i + 1] in ("job", "hydra", "all"):
            flags.append("--cfg")  # Hydra's `--cfg job`: verl-omni-train's `--cfg` prints the composed config
            i += 2
            continue
        if w.startswith("-"):
            flags.append(w)
            if "=" not in w and w in ("--config-path", "-cp", "--config-name", "-cn") and i + 1 < len(words):
                flags.append(words[i + 1])
                i += 1
        else:
            overrides.append(w)
        i += 1
    config_name = _config_name(flags)
    flags, file_lines, users_config = _migrate_config_files(flags, workdir)
    own_config = users_config or (config_name is not None and config_name.removesuffix(".yaml") != DEFAULT_CONFIG)
    # on another config, an override's meaning depends on that config's values (its window size, its LoRA rank)
    result = translate_overrides(overrides, skip=_CONFIG_DEPENDENT if own_config else ())
    report = result.report
    words, held_notes = list(result.overrides), []
    if own_config:
        words, held_notes = _hold_back_old_defaults(words, report, config_name or DEFAULT_CONFIG, users_config)
    lines = [f"verl-compat: `python -m verl.trainer.main_flowgrpo` runs `{NEW_CONSOLE}` (`{NEW_COMMAND}`)"]
    lines.extend(file_lines)
    lines.extend(_report_lines(report, "verl-compat: old overrides translated by verl-migrate-config:"))
    lines.extend(held_notes)
    kept, dropped = drop_meaningless(words)
    for i, word in enumerate(kept):  # old verl took `trainer.logger=console`; verl-omni wants a list
        key, _, value = word.partition("=")
        if key.lstrip("+") == "trainer.logger" and value and not value.startswith("["):
            kept[i] = f"{key}=[{value}]"
            lines.append(f"verl-compat: {word} -> {kept[i]} (trainer.logger is a list in verl-omni)")
    if dropped:
        lines.append("verl-compat: overrides with no meaning in verl-omni's trainer (no such setting), not passed on:")
        lines.extend(f"  dropped: {w}" for w in dropped)
    lines.append("verl-compat: new command: " + " ".join([NEW_COMMAND, *flags, *kept]))
    return [*flags, *kept], "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Translate the old overrides, print the translation, run verl-omni's trainer; return its exit status."""
    from verl_compat import VerlDeprecationWarning
    from verl_migrate.errors import MigrationError

    old = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get("VERL_COMPAT_SILENT", "") in ("", "0"):
        warnings.warn(
            f"`python -m verl.trainer.main_flowgrpo` is deprecated: use `{NEW_CONSOLE}` (or `{NEW_COMMAND}`) with "
            "migrated overrides (`verl-migrate-config --script run.sh` rewrites launch scripts).",
            VerlDeprecationWarning,
            stacklevel=2,
        )
    import importlib
    import tempfile

    with tempfile.TemporaryDirectory(prefix="verl_compat_config_") as workdir:  # migrated copies of config files
        try:
            new, text = translate_argv(old, workdir=workdir)
        except MigrationError as e:
            print(f"verl-compat: cannot translate the overrides or config files: {e}", file=sys.stderr)
            return 2
        if not {"-h", "--help"} & set(old):  # the help text comes alone: the notes are about a run
            print(text, file=sys.stderr, flush=True)

        entry = importlib.import_module(NEW_MODULE)
        # Ray workers and tools that look at sys.argv see the verl-omni command, not the old shim module
        sys.argv = [entry.__file__ or NEW_MODULE.replace(".", "/") + ".py", *new]
        return entry.run(new)


if __name__ == "__main__":
    sys.exit(main())
