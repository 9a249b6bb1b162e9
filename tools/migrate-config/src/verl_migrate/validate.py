"""`--validate`: check a migrated config against verl-omni, by key path.

With this project's verl-omni installed, the result is composed with its Hydra config and checked by its trainer's
`load_config`, as `verl-omni-train` would before starting (`verl_migrate.trainer_check`). With a verl-omni whose
config composes groups but has no such loader, the result is composed with Hydra alone (`verl_migrate.compose`).
Without verl-omni's config, the result is checked against the key tree shipped with this tool, and the report says
what that does not cover (`NOT_CHECKED`).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from verl_migrate import target
from verl_migrate.errors import MigrationError
from verl_migrate.keys import head_defaults, is_head_key, is_head_yaml_key, normalize, parse_text
from verl_migrate.report import FileReport

CONFIG_PACKAGE = target.CONFIG_PACKAGE
CONFIG_NAME = target.CONFIG_NAME
INSTALL_HINT = (
    "--validate needs verl-omni: from a checkout of the verl monorepo, "
    "pip install ./packages/verl-core ./packages/verl-omni './tools/migrate-config[validate]'"
)


def require_verl_omni() -> None:
    """Raise `MigrationError` (exit 2) when verl-omni is not importable."""
    if importlib.util.find_spec("verl_omni") is None:
        raise MigrationError(f"verl-omni is not installed; {INSTALL_HINT}")


def omni_config_dir() -> str | None:
    """Return the folder of verl-omni's Hydra configs if verl-omni ships `diffusion_trainer.yaml`, else None."""
    try:
        spec = importlib.util.find_spec(CONFIG_PACKAGE)
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if os.path.isfile(os.path.join(folder, f"{CONFIG_NAME}.yaml")):
            return folder
    return None


def trainer_loader() -> bool:
    """Return whether the installed verl-omni has this project's trainer config loader (`load_config`)."""
    if not target.extends_root() or omni_config_dir() is None:
        return False
    try:
        return importlib.util.find_spec(f"{CONFIG_PACKAGE}.loader") is not None
    except ImportError:  # a parent package fails to import: report as not installed
        return False


def _errors(found: list[tuple[str, str]], report: FileReport) -> int:
    before = len(report.findings)
    for key, problem in found:
        report.find("error", key, problem)
    return len(report.findings) - before


def _type_error(path: str, value: Any) -> str | None:
    dflt = head_defaults().get(path)
    if dflt is None or dflt in ("???", "null", "") or "${" in dflt:
        return None
    value = normalize(value)
    if isinstance(value, str) and ("$" in value or value == "???"):
        return None  # an interpolation, or a shell variable of a launch script: known only at run time
    want = parse_text(dflt)
    ok = {
        bool: lambda v: isinstance(v, bool),
        int: lambda v: isinstance(v, int) and not isinstance(v, bool),
        float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        list: lambda v: isinstance(v, (list, str)),
        dict: lambda v: isinstance(v, dict),
    }.get(type(want), lambda v: not isinstance(v, (list, dict)))
    if value is None or ok(value):
        return None
    return f"expected {type(want).__name__} (verl-omni default {dflt}), got {type(value).__name__} {value!r}"


def check_keys(items: list[tuple[str, Any, str]], report: FileReport) -> int:
    """Check `(path, value, prefix)` triples against the shipped key tree; add `error` findings; return how many."""
    from verl_migrate.engine import _suggest

    before = len(report.findings)
    for path, value, prefix in items:
        if path.split(".")[0] in ("hydra",):
            continue
        if not is_head_key(path):
            report.find("error", path, "verl-omni has no such key" + _suggest(path))
            continue
        if prefix == "+" and is_head_yaml_key(path):
            report.find("error", path, "Hydra refuses `+` on a key that already exists; drop the `+`")
        elif prefix == "" and not is_head_yaml_key(path) and value is not None:
            report.find("error", path, "key is not in verl-omni's YAML; Hydra needs `+` to add it")
        problem = _type_error(path, parse_text(value) if isinstance(value, str) and prefix is not None else value)
        if problem:
            report.find("error", path, problem)
    return len(report.findings) - before


#: what `--validate` cannot check while the target ships no Hydra config (said in its report)
NOT_CHECKED = (
    "this project's verl-omni ships no Hydra config yet (`{package}/{name}.yaml`), so the result was checked "
    "against the key tree shipped with verl-migrate-config ({source}): key names, value types, `+` prefixes and "
    "defaults-list group names. Not checked: that Hydra composes it (defaults entries resolve, packages line up), "
    "that every `${{...}}` interpolation resolves, that every key verl-omni's trainer reads is present, and the "
    "values verl-omni's config classes reject (ranges, choices, `_target_` classes)"
)


def _not_checked(report: FileReport) -> None:
    report.find(
        "warning",
        "<validate>",
        NOT_CHECKED.format(package=CONFIG_PACKAGE.replace(".", "/"), name=CONFIG_NAME, source=target.SOURCE),
    )


def validate_yaml(data: Any, report: FileReport, *, package: str | None = None, text: str | None = None) -> int:
    """Validate a migrated YAML mapping (a config-group file's keys live below `package`); return the error count.

    With the target's Hydra config installed and `text` given, the file is composed with it (`verl_migrate.compose`);
    otherwise it is checked against the shipped key tree, and the report says what that leaves unchecked.
    """
    from verl_migrate.yamldoc import YamlDoc

    doc = YamlDoc(data, FileReport(report.path), package=package or "")
    folder = omni_config_dir()
    if text is not None and trainer_loader():
        from verl_migrate import trainer_check

        if package:
            return _errors(trainer_check.check_group_file(text, package), report)
        if not doc.group_entries() and not doc.full_dump:  # a few keys: they layer on the trainer's root
            text = f"defaults:\n  - {CONFIG_NAME}\n  - _self_\n" + text
        return _errors(trainer_check.check_root(text), report)
    if folder is not None and text is not None and (package or doc.group_entries()):
        from verl_migrate.compose import Composer

        before = len(report.findings)
        with Composer(folder) as composer:
            found = composer.group_file(text, package) if package else composer.root(text)
        for key, problem in found:
            report.find("error", key, problem)
        return len(report.findings) - before
    if folder is not None:
        return compose_yaml(folder, doc, report)
    _not_checked(report)
    n = check_keys([(p, doc.get(p), None) for p in doc.leaves()], report)
    return n + check_groups(doc, report)


def check_groups(doc: Any, report: FileReport) -> int:
    """Report defaults entries of a root or layered config that name no group or option of the target's config."""
    before = len(report.findings)
    for e in doc.group_entries():
        if doc.package or e.group in ("_self_", CONFIG_NAME) or (e.option is None and "/" not in e.group):
            continue
        if e.group.lstrip("/") not in target.GROUP_OPTIONS:
            report.find("error", f"defaults: {e.name}", f"verl-omni has no config group `{e.group}`")
        elif e.option is not None and not target.option_exists(e.group, e.option):
            report.find("error", f"defaults: {e.name}", f"verl-omni's `{e.group}` group has no option `{e.option}`")
    return len(report.findings) - before


def validate_overrides(words: list[str], report: FileReport) -> int:
    """Validate migrated overrides (argv words); return the number of errors added to `report`."""
    from verl_migrate.overridedoc import parse_override

    entries = [e for e in (parse_override(w) for w in words) if e.is_config and e.prefix != "~"]
    folder = omni_config_dir()
    if trainer_loader():
        from verl_migrate import trainer_check

        found, unchecked = trainer_check.check_overrides([e.token() for e in entries])
        for key in unchecked:
            report.find("warning", key, "value from a shell variable: known only when the script runs; not checked")
        return _errors(found, report)
    if folder is not None:
        # a shell variable is known only when the script runs: compose with the key marked as to-be-given
        tokens = [e.token() if "$" not in str(e.value) else f"{e.prefix}{e.key}=???" for e in entries]
        return compose_overrides(folder, tokens, report)
    _not_checked(report)
    return check_keys([(str(e.key), e.value, e.prefix) for e in entries], report)


def compose_yaml(folder: str, doc: Any, report: FileReport) -> int:
    """Compose verl-omni's `diffusion_trainer` and merge each migrated key into it in struct mode."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    before = len(report.findings)
    with initialize_config_dir(config_dir=os.path.abspath(folder), version_base=None):
        cfg = compose(CONFIG_NAME)
    OmegaConf.set_struct(cfg, True)
    for path in doc.leaves():
        try:
            OmegaConf.update(cfg, path, normalize(doc.get(path)), merge=True)
        except Exception as e:  # omegaconf raises several error types; each is reported by key
            if is_head_key(path) and not is_head_yaml_key(path):
                continue  # a dataclass-only field: verl-omni accepts it although its YAML does not list it
            if is_head_yaml_key(path):
                report.find(
                    "error",
                    path,
                    "upstream verl-omni has this key, but this project's verl-omni does not "
                    "implement it yet; remove it or wait for the feature",
                )
                continue
            report.find("error", path, f"verl-omni's config refuses it: {type(e).__name__}: {str(e).splitlines()[0]}")
    return len(report.findings) - before


def compose_overrides(folder: str, overrides: list[str], report: FileReport) -> int:
    """Compose verl-omni's `diffusion_trainer` with `overrides`; report refused overrides and unresolved keys."""
    from verl_migrate.compose import Composer

    before = len(report.findings)
    with Composer(folder) as composer:
        for key, problem in composer.overrides(overrides):
            report.find("error", key, problem)
    return len(report.findings) - before
