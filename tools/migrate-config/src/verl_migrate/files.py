"""Reading inputs safely, walking directories (symlink loops detected) and writing files atomically."""

from __future__ import annotations

import contextlib
import errno
import os
import stat

from verl_migrate.errors import MigrationError

SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".sh": "script", ".bash": "script"}


def read_text(path: str) -> str:
    """Return the file's text; refuse unreadable, binary and non-UTF-8 files with a `MigrationError`."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except IsADirectoryError as e:
        raise MigrationError("is a directory (directories are walked only when given as PATH)", path=path) from e
    except PermissionError as e:
        raise MigrationError("cannot read: permission denied", path=path) from e
    except FileNotFoundError as e:
        raise MigrationError("no such file", path=path) from e
    except OSError as e:
        raise MigrationError(f"cannot read: {e.strerror or e}", path=path) from e
    nul = data.find(b"\0")
    if nul >= 0:
        raise MigrationError(
            f"binary file (NUL byte at offset {nul}); expected a YAML config or a shell script", path=path
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise MigrationError(
            f"not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}); convert it, e.g. `iconv -t utf-8`",
            path=path,
            line=line,
        ) from e


def kind_of(path: str, text: str | None = None, forced: str | None = None) -> str:
    """Return "yaml" or "script" for `path` (by suffix; other names are sniffed for the old entry point)."""
    if forced:
        return forced
    suffix = os.path.splitext(path)[1].lower()
    if suffix in SUFFIXES:
        return SUFFIXES[suffix]
    return "script" if text is not None and "verl.trainer.main_flowgrpo" in text else "yaml"


def discover(paths: list[str]) -> tuple[list[tuple[str, bool]], list[MigrationError]]:
    """Expand directories into their `*.yaml`/`*.yml`/`*.sh` files (hidden folders skipped).

    Returns `(path, given_explicitly)` pairs and the errors met (missing paths, symlink loops).
    """
    found: list[tuple[str, bool]] = []
    errors: list[MigrationError] = []
    seen: set[str] = set()
    for p in paths:
        if p == "-":
            found.append((p, True))
        elif os.path.isdir(p):
            _walk(p, [os.path.realpath(p)], found, errors, seen)
        elif os.path.lexists(p) and not os.path.exists(p):
            errors.append(MigrationError(_broken(p), path=p))
        else:
            real = os.path.realpath(p)
            if real not in seen:  # also given through a folder, or twice
                seen.add(real)
                found.append((p, True))
    return found, errors


def _broken(path: str) -> str:
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "symlink loop (following the link leads back to a link already followed); skipped"
    return "broken symlink (its target does not exist); skipped"


def _walk(folder: str, chain: list[str], found: list, errors: list, seen: set[str]) -> None:
    try:
        names = sorted(os.listdir(folder))
    except OSError as e:
        errors.append(MigrationError(f"cannot list directory: {e.strerror or e}", path=folder))
        return
    for name in names:
        full = os.path.join(folder, name)
        if os.path.isdir(full):
            if name.startswith(".") or name == "__pycache__":
                continue
            real = os.path.realpath(full)
            if real in chain:
                errors.append(
                    MigrationError(f"symlink loop: points back to the enclosing folder {real}; skipped", path=full)
                )
                continue
            if real in seen:
                continue
            seen.add(real)
            _walk(full, [*chain, real], found, errors, seen)
        elif os.path.splitext(name)[1].lower() in SUFFIXES:
            if os.path.islink(full) and not os.path.exists(full):
                errors.append(MigrationError(_broken(full), path=full))
                continue
            real = os.path.realpath(full)
            if real not in seen:
                seen.add(real)
                found.append((full, False))


def write_atomic(path: str, text: str, *, backup: bool) -> None:
    """Replace `path` with `text` atomically (temp file in the same folder, fsync, `os.replace`).

    With `backup`, the previous content is kept in `PATH.bak`. If anything fails or the process is interrupted,
    the original file is untouched and the temp file is removed.
    """
    import shutil
    import tempfile

    real = os.path.realpath(path)
    folder = os.path.dirname(real) or "."
    mode = stat.S_IMODE(os.stat(real).st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(real)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if backup:
            shutil.copy2(real, path + ".bak")
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
