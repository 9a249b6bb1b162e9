"""Carry out one `verl-migrate-config` invocation: discover inputs, migrate, write, diff, check, report."""

from __future__ import annotations

import sys
from typing import Any

from verl_migrate import files
from verl_migrate.errors import EXIT_CHANGED, EXIT_INPUT, EXIT_OK, MigrationError, NotAMappingError
from verl_migrate.report import FileReport, reports_to_json


class Runner:
    """One run of the command over all its inputs."""

    def __init__(self, args: Any):
        """Keep the parsed arguments."""
        self.args = args
        self.only, self.skip = _split(args.only), _split(args.skip)
        self.reports: list[FileReport] = []
        self.status = EXIT_OK

    def _fail(self, err: MigrationError, path: str | None = None) -> None:
        print(f"verl-migrate-config: {err}", file=sys.stderr)
        self.reports.append(FileReport(path or err.path or "<input>", error=str(err)))
        self.status = max(self.status, EXIT_INPUT)

    def run(self) -> int:
        """Process every input; return the exit code."""
        a = self.args
        if not a.paths:
            print("verl-migrate-config: no PATH given (see --help)", file=sys.stderr)
            return EXIT_INPUT
        try:
            from verl_migrate.engine import select_rules

            select_rules("yaml", self.only, self.skip)
            if a.validate:
                from verl_migrate.validate import require_verl_omni

                require_verl_omni()
        except (KeyError, MigrationError) as e:
            print(f"verl-migrate-config: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
            return EXIT_INPUT
        inputs, errors = files.discover(a.paths)
        for err in errors:
            self._fail(err)
        if (a.output and len(inputs) != 1) or (len(inputs) > 1 and not (a.in_place or a.check or a.diff)):
            print(
                "verl-migrate-config: several inputs: use -i, --check or --diff (or one PATH with -o)", file=sys.stderr
            )
            return EXIT_INPUT
        for path, explicit in inputs:
            self._one(path, explicit)
        self._emit_report()
        return self.status

    def _one(self, path: str, explicit: bool) -> None:
        from verl_migrate.migrate import migrate_script_text, migrate_yaml_text

        a = self.args
        try:
            if path == "-":
                if a.in_place:
                    raise MigrationError("-i cannot rewrite standard input; use -o OUT or redirect stdout", path="-")
                text = sys.stdin.read()
            else:
                text = files.read_text(path)
            crlf = "\r\n" in text
            src = text.replace("\r\n", "\n") if crlf else text
            kind = files.kind_of(path, src, "script" if a.script else None)
            if kind == "script":
                new, report = migrate_script_text(src, path, only=self.only, skip=self.skip)
            else:
                try:
                    new, report = migrate_yaml_text(src, path, only=self.only, skip=self.skip, package=a.package)
                except NotAMappingError:
                    if not explicit:
                        self.reports.append(FileReport(path, skipped="top level is not a mapping (not a config)"))
                        return
                    raise
            if new == src:  # nothing to migrate: keep the bytes, mixed line endings included
                new = text
            elif crlf:
                new = new.replace("\n", "\r\n")
            changed = new != text
            report.changed = changed
            if a.validate and report.skipped is None:
                self._validate(new, kind, report)
        except MigrationError as e:
            self._fail(e, path)
            return
        self.reports.append(report)
        self._output(path, text, new, changed)

    def _validate(self, new: str, kind: str, report: FileReport) -> None:
        from verl_migrate import validate, yaml_io

        if kind == "script":
            from verl_migrate.script import commands

            n = sum(validate.validate_overrides(words, report) for words in commands(new, report.path))
        else:
            from verl_migrate.groupfile import resolve_package

            data = yaml_io.load(new, report.path)
            package, _ = resolve_package(new, report.path, data, self.args.package)
            n = validate.validate_yaml(data, report, package=package, text=new)
        for f in report.findings:
            if f.category == "error":
                print(f"{report.path}: validate: {f.path}: {f.message}", file=sys.stderr)
        if n:
            self.status = max(self.status, EXIT_CHANGED)

    def _output(self, path: str, text: str, new: str, changed: bool) -> None:
        a = self.args
        if a.check:
            if changed:
                print(f"would migrate {path}", file=sys.stderr)
                self.status = max(self.status, EXIT_CHANGED)
        elif a.diff:
            if changed:
                import difflib

                sys.stdout.writelines(
                    difflib.unified_diff(
                        text.splitlines(True), new.splitlines(True), fromfile=f"a/{path}", tofile=f"b/{path}"
                    )
                )
        elif a.in_place:
            if changed:
                try:
                    files.write_atomic(path, new, backup=not a.no_backup)
                except OSError as e:
                    self._fail(MigrationError(f"cannot write: {_write_error(path, e)}; file left unchanged", path=path))
                    return
                print(f"migrated {path}" + ("" if a.no_backup else f" (backup: {path}.bak)"), file=sys.stderr)
        elif a.output:
            try:
                with open(a.output, "w", encoding="utf-8", newline="") as fh:
                    fh.write(new)
            except OSError as e:
                self._fail(MigrationError(f"cannot write: {e.strerror or e}", path=a.output), path)
        else:
            sys.stdout.write(new)

    def _emit_report(self) -> None:
        a = self.args
        if a.report is None:
            counts: dict[str, int] = {}
            for r in self.reports:
                for f in r.findings:
                    counts[f.category] = counts.get(f.category, 0) + 1
            if counts:
                summary = ", ".join(f"{n} {c}" for c, n in sorted(counts.items()))
                print(f"verl-migrate-config: {summary} (see --report text)", file=sys.stderr)
            return
        body = reports_to_json(self.reports) if a.report == "json" else "\n".join(r.to_text() for r in self.reports)
        if a.report_file:
            try:
                with open(a.report_file, "w", encoding="utf-8") as fh:
                    fh.write(body + "\n")
            except OSError as e:
                print(
                    f"verl-migrate-config: {a.report_file}: cannot write the report: {e.strerror or e}", file=sys.stderr
                )
                self.status = max(self.status, EXIT_INPUT)
        else:
            print(body, file=sys.stderr)


def _write_error(path: str, e: OSError) -> str:
    """Say why `-i` could not replace `path`: a permission problem names the folder or backup that refused."""
    if not isinstance(e, PermissionError):
        return str(e.strerror or e)
    if e.filename and str(e.filename).endswith(".bak"):
        return f"permission denied on the backup {e.filename} (or use --no-backup)"
    import os

    folder = os.path.dirname(os.path.realpath(path))
    return f"permission denied; -i writes a temp file next to the file, so the folder {folder} must be writable"


def _split(values: list[str]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]
