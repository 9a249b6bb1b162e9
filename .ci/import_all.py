"""Import every module of the given top-level packages; exit 1 listing each one that fails.

Used by `nox -s packaging` inside a venv holding one dist and its declared dependencies only.
`__main__` modules are skipped (importing them runs the program).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback
from pathlib import Path


def main(packages: list[str]) -> int:
    failures: list[str] = []
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
            except Exception:  # report every broken module, not only the first
                failures.append(f"{info.name}:\n{traceback.format_exc(limit=3)}")
    for failure in failures:
        print(f"FAILED {failure}", file=sys.stderr)
    print(f"imported {count} modules of {', '.join(packages)}; {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
