"""Import every module of the given top-level packages; exit 1 listing each one that fails.

    python import_all.py PACKAGE [PACKAGE ...] [--optional MOD[,MOD...]]

Used by `nox -s packaging` inside a venv holding one dist and its required dependencies only.
A module may fail only with `ModuleNotFoundError` for a module listed in `--optional` (what the
dist's extras provide, e.g. `pytest` for `verl_core.testing`): those are reported as needing an extra.
`__main__` modules are skipped (importing them runs the program).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback
from pathlib import Path


def main(packages: list[str], optional: set[str]) -> int:
    failures: list[str] = []
    needs_extra: list[str] = []
    count = 0
    for name in packages:
        root = importlib.import_module(name)
        if not (Path(root.__file__).parent / "py.typed").exists():
            failures.append(f"{name}: py.typed is missing from the installed package")
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{name}."):
            if info.name.rsplit(".", 1)[-1] == "__main__":
                continue
            try:
                importlib.import_module(info.name)
                count += 1
            except ModuleNotFoundError as e:
                if (e.name or "").split(".")[0] in optional:
                    needs_extra.append(f"{info.name} (needs {e.name}, from an extra)")
                else:
                    failures.append(f"{info.name}:\n{traceback.format_exc(limit=3)}")
            except Exception:  # report every broken module, not only the first
                failures.append(f"{info.name}:\n{traceback.format_exc(limit=3)}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    for line in needs_extra:
        print(f"needs an extra: {line}")
    print(
        f"imported {count} modules of {', '.join(packages)}; {len(needs_extra)} need an extra; {len(failures)} failed"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    optional: set[str] = set()
    if "--optional" in args:
        i = args.index("--optional")
        optional = {m for m in args[i + 1].split(",") if m}
        del args[i : i + 2]
    sys.exit(main(args, optional))
