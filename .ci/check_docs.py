"""Check that the docs name only things that exist: modules, classes, functions, console scripts, `python -m` targets.

    python .ci/check_docs.py [FILE_OR_DIR ...]     # default: README.md files and docs/

Scans inline code spans and fenced code blocks of Markdown files and checks, statically (no import, so it runs in the
docs session without torch):

- dotted names rooted at a project package (`verl_core.rollout.RolloutReplica`, `verl_omni.engine`): the module exists
  under a dist's `src/`, and each remaining part is defined there (class, function, assignment, import, `__all__`);
- bare class or function names (`DiffusersHttpServer`, `omega_conf_to_dataclass()`): defined somewhere in the project's
  sources, or listed with their package in `.ci/docs_external_names.txt`;
- `python -m MODULE` / `python3 -m MODULE`: a project module (a package needs `__main__.py`), a module the compat shim
  serves (its mapping data), or a tool listed in `.ci/docs_external_names.txt`;
- commands `verl-…` at the start of a command line: a `[project.scripts]` entry of some dist.

Exit 1 listing each `file:line: name: why` that fails.
"""

from __future__ import annotations

import ast
import builtins
import json
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC_DIRS = sorted(p for pattern in ("packages/*/src", "shims/*/src", "tools/*/src") for p in ROOT.glob(pattern))
PROJECT_ROOTS = ("verl_core", "verl_omni", "verl_compat", "verl_migrate")
EXTERNAL = ROOT / ".ci" / "docs_external_names.txt"
LEGACY_MAPS = sorted(ROOT.glob("tools/migrate-config/src/verl_migrate/data/legacy_imports*.json"))

SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FENCE = re.compile(r"^\s*(```|~~~)")
DOTTED = re.compile(r"\b((?:verl_core|verl_omni|verl_compat|verl_migrate)(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
PY_M = re.compile(r"\bpython3?\s+(?:-[A-Za-z]+\s+)*-m\s+([A-Za-z_][A-Za-z0-9_.]*)")
COMMAND = re.compile(r"(?:^|[;&|(]\s*|\$\s+)(verl-[a-z][a-z0-9-]*)\b")
BARE_CLASS = re.compile(r"^([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)(?:\(\))?$")
BARE_CALL = re.compile(r"^([a-z_][a-z0-9_]*)\(\)$")


@dataclass
class Index:
    """What the project's sources define: modules, their top-level names, every class/function name, scripts."""

    modules: dict[str, Path] = field(default_factory=dict)
    defined: dict[str, set[str]] = field(default_factory=dict)  # module -> top-level names
    members: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (module, class) -> member names
    all_names: set[str] = field(default_factory=set)
    scripts: set[str] = field(default_factory=set)
    dists: set[str] = field(default_factory=set)
    external: set[str] = field(default_factory=set)
    legacy: set[str] = field(default_factory=set)


def build_index() -> Index:
    index = Index()
    for src in SRC_DIRS:
        for path in src.rglob("*.py"):
            rel = path.relative_to(src).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            index.modules[name] = path
            _index_module(index, name, path)
    for pyproject in ROOT.glob("*/*/pyproject.toml"):
        project = tomllib.loads(pyproject.read_text()).get("project", {})
        index.scripts.update(project.get("scripts", {}))
        index.dists.add(project.get("name", ""))
    index.external.update(name for name in dir(builtins) if not name.startswith("_"))
    if EXTERNAL.is_file():
        for line in EXTERNAL.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                index.external.add(line.split()[0])
    for mapping in LEGACY_MAPS:
        index.legacy.update(_legacy_names(json.loads(mapping.read_text())))
    return index


def _legacy_names(data: object) -> set[str]:
    """Every old dotted name a compat mapping file serves (keys named `old` anywhere in the JSON)."""
    found: set[str] = set()
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "old" and isinstance(value, str):
                found.add(value)
            else:
                found |= _legacy_names(value)
    elif isinstance(data, list):
        for item in data:
            found |= _legacy_names(item)
    return found


def _index_module(index: Index, module: str, path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            members = set()
            for n in node.body:
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                    members.add(n.name)
                elif isinstance(n, ast.Assign):
                    members.update(t.id for t in n.targets if isinstance(t, ast.Name))
                elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                    members.add(n.target.id)
            index.members[(module, node.name)] = members
            index.all_names.add(node.name)
            index.all_names.update(members)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
            index.all_names.add(node.name)
        elif isinstance(node, ast.Assign):  # module-level aliases and constants are definitions too
            assigned = {t.id for t in node.targets if isinstance(t, ast.Name)}
            names.update(assigned)
            index.all_names.update(n for n in assigned if not n.startswith("_"))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
            index.all_names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try):  # names bound under `if TYPE_CHECKING:` / try-import
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom | ast.Import):
                    names.update((a.asname or a.name).split(".")[0] for a in sub.names)
    index.defined[module] = names


def resolve_dotted(index: Index, dotted: str) -> str | None:
    """None when `dotted` names an existing module or a name defined in one; else why not."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module not in index.modules:
            continue
        rest = parts[cut:]
        if not rest:
            return None
        if rest[0] in index.modules.get(f"{module}.{rest[0]}", {}) or f"{module}.{rest[0]}" in index.modules:
            continue
        if rest[0] not in index.defined.get(module, set()):
            return f"module {module} defines no {rest[0]!r}"
        if len(rest) == 1:
            return None
        members = _members(index, module, rest[0])
        if members is None or rest[1] in members:
            return None  # re-exported class (members unknown here) or a known member
        return f"{module}.{rest[0]} has no member {rest[1]!r}"
    return f"no module {parts[0]!r} in the project sources" if len(parts) == 1 else f"no module {dotted!r}"


def _members(index: Index, module: str, cls: str) -> set[str] | None:
    if (module, cls) in index.members:
        return index.members[(module, cls)]
    for (mod, name), members in index.members.items():  # re-exported from a submodule
        if name == cls and mod.startswith(module + "."):
            return members
    return None


def check_text(index: Index, text: str, where: str) -> list[str]:
    """Problems found in one chunk of code-span or code-block text."""
    problems = []
    for match in PY_M.finditer(text):
        module = match.group(1).rstrip(".")
        if module in index.external or module.split(".")[0] in index.external or module in index.legacy:
            continue
        if module.split(".")[0] in PROJECT_ROOTS:
            path = index.modules.get(module)
            if path is None:
                problems.append(f"{where}: python -m {module}: no such module in the project")
            elif path.name == "__init__.py" and f"{module}.__main__" not in index.modules:
                problems.append(f"{where}: python -m {module}: the package has no __main__.py")
        else:
            problems.append(f"{where}: python -m {module}: not a project module nor a listed tool")
    for match in COMMAND.finditer(text):
        if re.sub(r"\[[^\]]*\]$", "", text.strip()) in index.dists:  # a dist (with extras), not a command
            continue
        if match.group(1) not in index.scripts:
            problems.append(f"{where}: {match.group(1)}: no dist declares this console script")
    for match in DOTTED.finditer(PY_M.sub("", text)):  # `python -m X` was checked above
        dotted = match.group(1).rstrip(".")
        why = resolve_dotted(index, dotted)
        if why and dotted not in index.external:
            problems.append(f"{where}: {dotted}: {why}")
    stripped = text.strip()
    bare = BARE_CLASS.match(stripped) or BARE_CALL.match(stripped)
    if bare and bare.group(1) not in index.all_names and bare.group(1) not in index.external:
        problems.append(f"{where}: {stripped}: defined nowhere in the project sources")
    return problems


def check_file(index: Index, path: Path) -> list[str]:
    problems = []
    in_fence = False
    rel = path.relative_to(ROOT)
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        where = f"{rel}:{number}"
        if in_fence:
            if line.lstrip().startswith(("#", "//")):  # comments in examples may mention anything
                continue
            problems += check_text(index, line, where)
        else:
            for span in SPAN.findall(line):
                problems += check_text(index, span, where)
    return problems


def default_targets() -> list[Path]:
    files = [ROOT / "README.md", *ROOT.glob("*/*/README.md"), *(ROOT / "docs").rglob("*.md")]
    return sorted(p for p in files if p.is_file())


def main(argv: list[str]) -> int:
    index = build_index()
    targets: list[Path] = []
    for arg in argv or [str(p) for p in default_targets()]:
        path = Path(arg).resolve()
        targets += sorted(path.rglob("*.md")) if path.is_dir() else [path]
    problems = [p for path in targets for p in check_file(index, path)]
    for problem in problems:
        print(problem)
    print(f"checked {len(targets)} Markdown files: {len(problems)} names that do not exist", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
