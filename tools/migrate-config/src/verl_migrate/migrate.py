"""Public entry points: migrate YAML text, a launch script, or a list of Hydra overrides."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from verl_migrate import engine, target, yaml_io
from verl_migrate.errors import NotAMappingError
from verl_migrate.groupfile import resolve_package
from verl_migrate.overridedoc import OverrideDoc
from verl_migrate.report import FileReport


@dataclasses.dataclass
class OverridesResult:
    """What `translate_overrides` returns: the verl-omni overrides and the report of what changed."""

    overrides: list[str]
    report: FileReport

    @property
    def changed(self) -> bool:
        """Return whether any override was rewritten, dropped or added."""
        return self.report.changed


def migrate_yaml_text(
    text: str,
    path: str = "<string>",
    *,
    only: Iterable[str] | None = None,
    skip: Iterable[str] | None = None,
    package: str | None = None,
    legacy: bool = False,
) -> tuple[str, FileReport]:
    """Migrate one YAML document; return the new text (the input itself when nothing changes) and the report.

    `package` (or a `# @package <path>` header, or the file's folder: `.../model/x.yaml`) marks a config-group file
    whose keys live below that path. `legacy` says the document was written for old verl even if nothing in it shows
    it (a config run by the old entry point): old defaults it relies on are then written, as for launch scripts.

    Raises:
        MigrationError: invalid YAML, duplicate keys, conflicting keys (`ConflictError`), a top level that is not
            a mapping (`NotAMappingError`), or a config-group file whose package is unknown.
    """
    from verl_migrate.yamldoc import YamlDoc

    report = FileReport(path, kind="yaml")
    data = yaml_io.load(text, path)
    if data is None:
        report.skipped = "empty YAML document"
        return text, report
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else type(data).__name__
        raise NotAMappingError(
            f"the top level is a {kind}, not a mapping; a verl config starts with keys such as `actor_rollout_ref:`",
            path=path,
            line=1,
        )
    package, how = resolve_package(text, path, data, package)
    if package and how != "--package":
        group = target.group_of_package(package)
        where = f"; verl-omni's group for it is `{group}`" if group else ""
        report.find("note", package, f"config-group file for `{package}` (from {how}){where}")
    doc = YamlDoc(data, report, package=package)
    doc.legacy = doc.legacy or legacy
    doc.indent = yaml_io.guess_style(text)["mapping"]
    engine.run(doc, engine.select_rules("yaml", only, skip))
    if not report.changes:
        return text, report
    new = yaml_io.restore_spelling(text, yaml_io.dump(doc.packaged_root(), text))
    report.changed = new != text
    return (new if report.changed else text), report


def translate_overrides(
    overrides: list[str], *, only: Iterable[str] | None = None, skip: Iterable[str] | None = None
) -> OverridesResult:
    """Translate old `main_flowgrpo` Hydra overrides (argv words) to verl-omni ones.

    Raises:
        MigrationError: an old key and its new key are both given with different values.
    """
    report = FileReport("<overrides>", kind="overrides")
    doc = OverrideDoc(list(overrides), report, legacy=True)
    engine.run(doc, engine.select_rules("overrides", only, skip))
    out = doc.tokens()
    report.changed = out != list(overrides)
    return OverridesResult(out, report)


def migrate_script_text(
    text: str, path: str = "<script>", *, only: Iterable[str] | None = None, skip: Iterable[str] | None = None
) -> tuple[str, FileReport]:
    """Migrate the old-entry-point commands of a launch script; return the new text and the report."""
    from verl_migrate.script import migrate_script_text as _run

    return _run(text, path, only, skip)
