"""`--validate`: check a migrated config against verl-omni, by key path.

With verl-omni installed, its Hydra config (`verl_omni/trainer/config/diffusion_trainer.yaml`) is composed with the
result when it exists; otherwise the result is checked against the verl-omni key tree shipped with this tool.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from verl_migrate.errors import MigrationError
from verl_migrate.keys import head_defaults, is_head_key, is_head_yaml_key, normalize, parse_text
from verl_migrate.report import FileReport

CONFIG_PACKAGE = "verl_omni.trainer.config"
CONFIG_NAME = "diffusion_trainer"
INSTALL_HINT = "--validate needs verl-omni: pip install 'verl-migrate-config[validate]'"


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


def validate_yaml(data: Any, report: FileReport, *, package: str | None = None) -> int:
    """Validate a migrated YAML mapping (a config-group file's keys live below `package`); return the error count."""
    from verl_migrate.yamldoc import YamlDoc

    doc = YamlDoc(data, FileReport(report.path), package=package or "")
    folder = omni_config_dir()
    if folder is not None:
        return compose_yaml(folder, doc, report)
    report.find("warning", "<validate>", "verl-omni ships no Hydra config yet; checked against the shipped key tree")
    return check_keys([(p, doc.get(p), None) for p in doc.leaves()], report)


def validate_overrides(words: list[str], report: FileReport) -> int:
    """Validate migrated overrides (argv words); return the number of errors added to `report`."""
    from verl_migrate.overridedoc import parse_override

    entries = [e for e in (parse_override(w) for w in words) if e.is_config and e.prefix != "~"]
    folder = omni_config_dir()
    if folder is not None:
        return compose_overrides(folder, [e.token() for e in entries], report)
    report.find("warning", "<validate>", "verl-omni ships no Hydra config yet; checked against the shipped key tree")
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
    """Compose verl-omni's `diffusion_trainer` with `overrides`; on failure find each refused override."""
    from hydra import compose, initialize_config_dir

    before = len(report.findings)
    with initialize_config_dir(config_dir=os.path.abspath(folder), version_base=None):
        try:
            compose(CONFIG_NAME, overrides=overrides)
            return 0
        except Exception:  # find which overrides Hydra refuses, one at a time
            for ov in overrides:
                try:
                    compose(CONFIG_NAME, overrides=[ov])
                except Exception as e:
                    key = ov.lstrip("+~").split("=", 1)[0]
                    report.find("error", key, f"Hydra refuses `{ov}`: {str(e).splitlines()[0]}")
    return len(report.findings) - before
