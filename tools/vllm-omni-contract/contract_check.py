"""Static check of the vLLM-Omni / vLLM contract (`contract.py`) against released wheels, without importing them.

CI tooling, not shipped in any dist. Runs with the standard library only (`nox -s vllm_omni-<version>` calls it
with nox's own interpreter)::

    python tools/vllm-omni-contract/contract_check.py --release 0.30.0 --omni-wheel vllm_omni-0.30.0-py3-none-any.whl
    python tools/vllm-omni-contract/contract_check.py --table   # the docs' support table, from the contract

The contract itself is runtime data (`verl_omni/rollout/vllm_omni/contract.py`, read by `compat`); this tool
imports it from verl-omni when that imports, else loads the file by path from the checkout.

The vllm-omni wheel is read from the downloaded file. The paired vLLM wheel (~300 MB) is never downloaded
whole: the zip's central directory and the members the contract names are fetched with HTTP range requests
and cached under `DIR/vllm-<version>/`, so later runs read only the cache. Every failure names the contract
row, the symbol and the version; the exit code is 1 when any row fails.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ContractFailure",
    "Resolver",
    "check_release",
    "load_contract",
    "load_wheel_sources",
    "minor",
    "support_table",
]


HERE = Path(__file__).resolve().parent
CONTRACT_PY = HERE.parents[1] / "packages/verl-omni/src/verl_omni/rollout/vllm_omni/contract.py"


def _load_path(key: str, path: Path) -> Any:
    """Module `key` executed from the file `path` (once; later calls return the same module)."""
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[key] = module  # dataclasses look their module up by name
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules[key]


def load_contract() -> Any:
    """`verl_omni.rollout.vllm_omni.contract`: imported from verl-omni when it imports, else loaded by path."""
    try:
        return importlib.import_module("verl_omni.rollout.vllm_omni.contract")
    except ImportError:
        return _load_path("_vllm_omni_contract", CONTRACT_PY)


def load_wheel_sources() -> Any:
    """The `wheel_sources` module beside this file (the wheel readers)."""
    return _load_path("_vllm_omni_wheel_sources", HERE / "wheel_sources.py")


def minor(version: str) -> tuple[int, int]:
    """`"0.27.0rc1"` / `"0.28"` / `"0.25.1.dev3+gabc"` -> `(0, 27)` / `(0, 28)` / `(0, 25)`."""
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or "0")
    except (IndexError, ValueError):
        raise ValueError(f"version {version!r}: expected MAJOR.MINOR[.PATCH]") from None


def applies(expect: Any, version: str) -> bool:
    """Whether a contract row holds for vllm-omni `version` (`since <= version < before`)."""
    v = minor(version)
    if expect.since is not None and v < minor(expect.since):
        return False
    return not (expect.before is not None and v >= minor(expect.before))


@dataclass(frozen=True)
class ContractFailure:
    """One failed row: what is wrong, for which release."""

    id: str
    package: str
    version: str
    message: str

    def __str__(self) -> str:
        return f"{self.package} {self.version}: {self.message} [contract row {self.id!r}]"


# ---- the resolver: modules, names, classes and functions of a source tree, by AST only --------------------------


class Resolver:
    """Finds definitions in a package's sources by AST: re-exports, module `__getattr__`, base classes."""

    def __init__(self, source: Any, package: str) -> None:
        self.source, self.package = source, package
        self._asts: dict[str, ast.Module | None] = {}

    def module(self, dotted: str) -> ast.Module | None:
        """The parsed module (a `.py` file or a package `__init__.py`), None when absent."""
        if dotted not in self._asts:
            base = dotted.replace(".", "/")
            text = self.source.read(f"{base}.py")
            if text is None:
                text = self.source.read(f"{base}/__init__.py")
            self._asts[dotted] = ast.parse(text) if text is not None else None
        return self._asts[dotted]

    def _is_package(self, dotted: str) -> bool:
        return f"{dotted.replace('.', '/')}/__init__.py" in self.source.names

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        parts = module.split(".")
        keep = parts if self._is_package(module) else parts[:-1]
        keep = keep[: len(keep) - (node.level - 1)]
        return ".".join([*keep, *([node.module] if node.module else [])])

    def find(self, module: str, name: str, _seen: frozenset[tuple[str, str]] = frozenset()) -> tuple[str, ast.AST]:
        """`(defining module, node)` of top-level `name` in `module`; raises KeyError saying why not."""
        if (module, name) in _seen:
            raise KeyError(f"`{module}.{name}` is an import cycle")
        seen = _seen | {(module, name)}
        tree = self.module(module)
        if tree is None:
            raise KeyError(f"module `{module}` does not exist")
        lazy: ast.FunctionDef | None = None
        for node in _top_level(tree.body):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return module, node
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
                lazy = node
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return module, node
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return module, node
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        return self._follow(self._absolute(module, node), alias.name, seen)
        if lazy is not None:  # `def __getattr__(name): if name == "X": from m import X; return X`
            for node in ast.walk(lazy):
                if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
                    target = next(a.name for a in node.names if (a.asname or a.name) == name)
                    return self._follow(self._absolute(module, node), target, seen)
        if self._is_package(module) and self.module(f"{module}.{name}") is not None:
            return f"{module}.{name}", self.module(f"{module}.{name}")  # type: ignore[return-value]
        raise KeyError(f"`{module}` defines no `{name}`")

    def _follow(self, module: str, name: str, seen: frozenset[tuple[str, str]]) -> tuple[str, ast.AST]:
        if module.split(".")[0] != self.package:  # a re-export from another package: present, not looked into
            return module, ast.ImportFrom(module=module, names=[ast.alias(name=name)], level=0)
        return self.find(module, name, seen)

    def bases(self, module: str, cls: ast.ClassDef) -> Iterator[tuple[str, ast.ClassDef]]:
        """Base classes of `cls` defined in this package (depth first, each once)."""
        for base in cls.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if name is None:
                continue
            try:
                where, node = self.find(module, name)
            except KeyError:
                continue  # a base from another package (vLLM, typing): not followed
            if isinstance(node, ast.ClassDef):
                yield where, node
                yield from self.bases(where, node)

    def member(self, module: str, qualname: str) -> tuple[str, ast.AST, ast.ClassDef | None]:
        """`(module, node, owner class)` for `name` or `Class.member` (members are looked up in base classes)."""
        head, _, rest = qualname.partition(".")
        where, node = self.find(module, head)
        if not rest:
            return where, node, None
        if isinstance(node, ast.ImportFrom):
            raise KeyError(f"`{module}.{head}` is re-exported from `{node.module}` (another package, not checked here)")
        if not isinstance(node, ast.ClassDef):
            raise KeyError(f"`{module}.{head}` is not a class")
        for owner_module, owner in [(where, node), *self.bases(where, node)]:
            for item in owner.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == rest:
                    return owner_module, item, owner
        raise KeyError(f"`{module}.{head}` has no method `{rest}` (itself or in its bases from {self.package})")

    def class_members(self, module: str, name: str) -> tuple[set[str], set[str]]:
        """`(annotated fields, all attribute names)` of class `name`, including its bases in the package."""
        where, node = self.find(module, name)
        if not isinstance(node, ast.ClassDef):
            raise KeyError(f"`{module}.{name}` is not a class")
        fields: set[str] = set()
        attrs: set[str] = set()
        for _, cls in [(where, node), *self.bases(where, node)]:
            for item in cls.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    fields.add(item.target.id)
                    attrs.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    attrs.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    attrs.add(item.name)
        return fields, attrs


def _top_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Top-level statements, looking inside `if` / `try` blocks (version guards, optional imports)."""
    for node in body:
        if isinstance(node, ast.If):
            yield from _top_level(node.body)
            yield from _top_level(node.orelse)
        elif isinstance(node, ast.Try):
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(node.orelse)
        else:
            yield node


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, owner: ast.ClassDef | None) -> tuple[list[str], set[str]]:
    """`(positional parameter names in order, names passable by keyword)`, without `self` / `cls`."""
    a = fn.args
    positional = [p.arg for p in [*a.posonlyargs, *a.args]]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    bound = positional[:1] if owner is not None and not static else []
    keyword = {p.arg for p in [*a.args, *a.kwonlyargs]} - {p.arg for p in a.posonlyargs} - set(bound)
    return positional[len(bound) :], keyword


def _calls(fn: ast.AST, callee: str) -> list[ast.Call]:
    """Calls of `callee` in `fn`, including through a local `x = getattr(obj, "callee", None)` alias."""
    names = {callee}
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            call = node.value
            is_getattr = isinstance(call.func, ast.Name) and call.func.id == "getattr" and len(call.args) >= 2
            if is_getattr and isinstance(call.args[1], ast.Constant) and call.args[1].value == callee:
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if name in names:
                out.append(node)
    return out


def _check(resolver: Resolver, e: Any) -> str | None:
    """None when row `e` holds, else what is wrong (one sentence naming the symbol)."""
    where = f"`{e.module}.{e.name}`" if e.name else f"`{e.module}`"
    try:
        if e.kind == "module":
            return None if resolver.module(e.module) is not None else f"module {where} does not exist"
        if e.kind in ("strings", "references"):
            tree = resolver.module(e.module)
            if tree is None:
                return f"module {where} does not exist"
            found = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            if e.kind == "references":
                found |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
                found |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
            missing = [s for s in e.names if s not in found]
            what = "string literals" if e.kind == "strings" else "names"
            return f"{where} lacks the {what} {missing}" if missing else None
        if e.kind == "bases":
            _, node = resolver.find(e.module, e.name)
            if not isinstance(node, ast.ClassDef):
                return f"{where} is not a class"
            bases = [ast.unparse(b) for b in node.bases]
            missing = [n for n in e.names if n not in bases]
            return f"{where} has bases {bases}, expected {missing} among them" if missing else None
        if e.kind == "no_symbol":
            if "." in e.name:  # the owner must exist, or a typo would pass
                resolver.find(e.module, e.name.split(".")[0])
            try:
                resolver.member(e.module, e.name)
            except KeyError:
                return None
            return f"{where} exists but the contract expects it to be absent"
        if e.kind in ("fields", "no_fields", "attrs"):
            fields, attrs = resolver.class_members(e.module, e.name)
            have = attrs if e.kind == "attrs" else fields
            if e.kind == "no_fields":
                present = [n for n in e.names if n in fields]
                return f"{where} declares {present}, which the contract expects to be absent" if present else None
            missing = [n for n in e.names if n not in have]
            what = "attributes" if e.kind == "attrs" else "fields"
            return f"{where} lacks the {what} {missing}" if missing else None
        _, node, owner = resolver.member(e.module, e.name)
        if e.kind == "symbol":
            return None
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return f"{where} is not a function"
        if e.kind == "signature":
            positional, keyword = _params(node, owner)
            missing = [n for n in e.names if n not in keyword]
            if missing:
                have = positional + sorted(keyword - set(positional))
                return f"{where} takes no parameter(s) {missing} by keyword (it takes {have})"
            if list(e.positional) != positional[: len(e.positional)]:
                return f"{where} takes {positional[: len(e.positional)]} first, expected {list(e.positional)}"
            return None
        if e.kind == "assigns":
            assigned = {
                t.attr
                for n in ast.walk(node)
                if isinstance(n, (ast.Assign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
            }
            missing = [n for n in e.names if n not in assigned]
            return f"{where} does not assign self.{missing}" if missing else None
        if e.kind == "calls":
            calls = _calls(node, e.callee)
            if not calls:
                return f"{where} does not call `{e.callee}`"
            if not any(set(e.names) <= {k.arg for k in c.keywords if k.arg} for c in calls):
                return f"{where} calls `{e.callee}` without the keywords {list(e.names)}"
            return None
        if e.kind == "unpacks":
            for n in ast.walk(node):
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and n.value in _calls(n, e.callee):
                    target = n.targets[0]
                    if isinstance(target, ast.Tuple) and len(target.elts) == len(e.names):
                        return None
            return f"{where} does not unpack `{e.callee}(...)` into {len(e.names)} values"
        raise ValueError(f"unknown contract row kind {e.kind!r}")
    except KeyError as err:
        return f"{where}: {err.args[0]}"


def _requirement(metadata: str, project: str) -> str | None:
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            req = line.split(":", 1)[1].strip()
            if req.split(";")[0].replace(" ", "").lower().startswith(project) and "extra ==" not in req:
                return req.split(";")[0].replace(" ", "")[len(project) :]
    return None


def check_release(release: Any, omni: Any, vllm: Any | None, expectations: tuple[Any, ...]) -> list[ContractFailure]:
    """Check every row that applies to `release` against the vllm-omni source `omni` and the vLLM source `vllm`."""
    failures: list[ContractFailure] = []
    resolvers = {"vllm_omni": Resolver(omni, "vllm_omni")}
    if vllm is not None:
        resolvers["vllm"] = Resolver(vllm, "vllm")
    for e in expectations:
        if not applies(e, release.omni) or e.package not in resolvers:
            continue
        problem = _check(resolvers[e.package], e)
        if problem is not None:
            version = release.omni if e.package == "vllm_omni" else release.vllm
            failures.append(ContractFailure(e.id, e.package.replace("_", "-"), version, problem))
    if hasattr(omni, "metadata"):
        meta = omni.metadata()
        checks = {"diffusers": release.diffusers}
        for project, want in checks.items():
            got = _requirement(meta, project)
            if got != want:
                message = f"METADATA requires {project}{got}, the release row says {want}"
                failures.append(ContractFailure(f"release-{project}", "vllm-omni", release.omni, message))
        python = next((ln.split(":", 1)[1].strip() for ln in meta.splitlines() if ln.startswith("Requires-Python")), "")
        if sorted(python.replace(" ", "").split(",")) != sorted(release.python.split(",")):
            message = f"Requires-Python is {python}, the release row says {release.python}"
            failures.append(ContractFailure("release-python", "vllm-omni", release.omni, message))
    return failures


def support_table(contract: Any) -> str:
    """The docs' Markdown table of checked releases and the version branches (generated from the contract)."""
    features = sorted({e.feature for e in contract.EXPECTATIONS if e.feature})
    head = "| vllm-omni | vllm | torch | diffusers | Python | ran | " + " | ".join(f"`{f}`" for f in features) + " |"
    rule = "|" + "---|" * (6 + len(features))
    rows = [head, rule]
    for r in contract.RELEASES:
        flags = []
        for f in features:
            row = next(e for e in contract.EXPECTATIONS if e.feature == f)
            flags.append("yes" if applies(row, r.omni) else "no")
        cells = f"| {r.omni} | {r.vllm} | {r.torch} | {r.diffusers} | {r.python} | {getattr(r, 'ran', 'static')} | "
        rows.append(cells + " | ".join(flags) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Command line: check one release, or print the docs table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--release", help="vllm-omni version, a row of contract.RELEASES (e.g. 0.30.0)")
    parser.add_argument("--omni-wheel", help="path of the downloaded vllm-omni wheel")
    parser.add_argument("--cache", help="folder for the vLLM members fetched by range requests")
    parser.add_argument("--skip-vllm", action="store_true", help="check the vllm-omni rows only")
    parser.add_argument("--table", action="store_true", help="print the support table and exit")
    args = parser.parse_args(argv)
    contract = load_contract()
    if args.table:
        print(support_table(contract))
        return 0
    release = next((r for r in contract.RELEASES if r.omni == args.release), None)
    if release is None or not args.omni_wheel:
        known = ", ".join(r.omni for r in contract.RELEASES)
        parser.error(f"--release must be one of {known} and --omni-wheel is required (got {args.release!r})")
    sources = load_wheel_sources()
    omni = sources.ZipSource(args.omni_wheel)
    vllm = None if args.skip_vllm else sources.RemoteWheelSource("vllm", release.vllm, args.cache or ".contract-cache")
    failures = check_release(release, omni, vllm, contract.EXPECTATIONS)
    rows = [e for e in contract.EXPECTATIONS if applies(e, release.omni) and (vllm or e.package == "vllm_omni")]
    for failure in failures:
        print(f"FAIL {failure}")
    fetched = f", {vllm.fetched_bytes / 1e6:.1f} MB of vllm fetched" if vllm is not None else ""
    print(f"vllm-omni {release.omni} + vllm {release.vllm}: {len(rows)} contract rows, {len(failures)} failed{fetched}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
