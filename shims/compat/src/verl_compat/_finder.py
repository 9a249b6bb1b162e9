"""The meta-path finder that serves old `verl.*` / `examples.*` diffusion modules (installed by `verl_compat.pth`).

Contract: `find_spec` returns None at once for every name not below `verl` or `examples` (no other work at
start-up or for unrelated imports). Below them:

- with upstream verl installed, real modules win: removed modules are served only where verl has no such module;
  trimmed and registry modules load normally and then get a module `__getattr__` for their old names (and the old
  registry names are registered);
- without upstream verl, a minimal `verl` package carries only the old diffusion paths, and any other
  `verl.<x>` raises ModuleNotFoundError saying verl is not installed and how to install it;
- `examples.*` (the old example modules named in configs) is served only when no real `examples` module exists.
"""

from __future__ import annotations

import _thread
import sys
import warnings
from importlib.machinery import ModuleSpec

from verl_compat._warning import VerlDeprecationWarning

TYPE_CHECKING = False

if TYPE_CHECKING:  # start-up cost: no typing/importlib.abc/importlib.util at run time
    from types import ModuleType
    from typing import Any

_HEADS = ("verl", "examples")


class _FacadeLoader:
    """Builds an old module as a facade: its names are served lazily from the mapping (with warnings)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "removed" | "trimmed" | "registry" | "package" (an intermediate package)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        from verl_compat import _serve

        name = module.__name__
        hint = _serve.INSTALL_HINT if name.startswith("verl") and not _upstream_verl() else ""
        row = _serve.table().module_rows().get(name)
        module.__doc__ = f"verl-compat facade of the removed `{name}`" + (
            f" (now `{row.new}`)." if row is not None and row.new else "."
        )
        module.__all__ = _serve.provided_names(name)  # type: ignore[attr-defined]
        module.__getattr__ = _serve.make_getattr(name, None, hint)  # type: ignore[attr-defined]
        module.__dir__ = lambda: sorted(set(module.__dict__) | set(module.__all__))  # type: ignore[attr-defined]
        if name == "verl" or name.startswith("verl."):
            module.__verl_compat_facade__ = True  # type: ignore[attr-defined]


class _PatchingLoader:
    """Runs the real loader of an upstream verl module, then adds its old names (and old registry names)."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:  # get_code, get_source, is_package, get_resource_reader, ...
        return getattr(self.real, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        from verl_compat import _serve, registries

        self.real.exec_module(module)
        _serve.patch_module(module)
        registries.register_upstream(module)


class LegacyFinder:
    """Serves the old diffusion module paths of the mapping; declines everything else."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname.partition(".")[0] not in _HEADS or _thread.get_ident() in _BUSY:
            return None
        return _find(fullname, path)

    def invalidate_caches(self) -> None:
        global _UPSTREAM
        _UPSTREAM = None


_BUSY: set[int] = set()  # threads inside `_real_spec` (this finder steps aside for them only)
_UPSTREAM: bool | None = None
_FINDER = LegacyFinder()


def _real_spec(fullname: str, path: Any) -> ModuleSpec | None:
    """The spec the rest of `sys.meta_path` would give (this finder skipped)."""
    me = _thread.get_ident()
    _BUSY.add(me)
    try:
        for finder in sys.meta_path:
            if finder is _FINDER or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path)
            if spec is not None:
                return spec
        return None
    finally:
        _BUSY.discard(me)


def _upstream_verl() -> bool:
    """Whether a real `verl` package is importable (looked up once)."""
    global _UPSTREAM
    if _UPSTREAM is None:
        mod = sys.modules.get("verl")
        if mod is not None:
            _UPSTREAM = not getattr(mod, "__verl_compat_facade__", False)
        else:
            _UPSTREAM = _real_spec("verl", None) is not None
    return _UPSTREAM


def _facade_spec(fullname: str, kind: str, is_package: bool) -> ModuleSpec:
    spec = ModuleSpec(fullname, _FacadeLoader(kind), is_package=is_package)
    if is_package:
        spec.submodule_search_locations = []
    return spec


def _find(fullname: str, path: Any) -> ModuleSpec | None:
    from verl_compat import _serve

    table = _serve.table()
    known = table.old_modules()
    row = table.module_rows().get(fullname)
    is_package = any(m.startswith(fullname + ".") for m in known)
    if fullname not in known:
        if fullname.startswith("verl") and not _upstream_verl():
            raise ModuleNotFoundError(f"No module named {fullname!r}: {_serve.INSTALL_HINT}", name=fullname)
        return None
    if fullname.startswith("examples") or _upstream_verl():
        real = _real_spec(fullname, path)
        if real is not None:
            if row is not None and row.kind in ("trimmed", "registry") and real.loader is not None:
                real.loader = _PatchingLoader(real.loader)
            return real
    if row is not None and row.new and row.new.startswith("verl_compat."):
        # served from the shim's own file under the old name, so `python -m <old>` (runpy) gets real code
        import importlib.util

        origin = importlib.util.find_spec(row.new)
        if origin is None or origin.origin is None:
            raise ModuleNotFoundError(f"verl-compat is incomplete: {row.new} is missing", name=fullname)
        return importlib.util.spec_from_file_location(fullname, origin.origin)
    return _facade_spec(fullname, row.kind if row is not None else "package", is_package)


def install() -> bool:
    """Put the finder first on `sys.meta_path` and show `VerlDeprecationWarning` by default (idempotent).

    `-W` / `PYTHONWARNINGS` options naming the category are applied again after the default filter, so that
    `-W error::verl_compat.VerlDeprecationWarning` wins even when Python could not import the category at start-up.
    (Python reads `-W` before site-packages is on `sys.path`, so it has already printed its own harmless
    `Invalid -W option ignored: invalid module name: 'verl_compat'`; nothing run from a `.pth` can take that back.)
    An option that still fails here is reported once, prefixed `verl-compat:`, so the two lines are told apart.
    """
    if _FINDER in sys.meta_path:
        return False
    sys.meta_path.insert(0, _FINDER)
    warnings.filterwarnings("default", category=VerlDeprecationWarning)
    for option in sys.warnoptions:
        if "VerlDeprecationWarning" in option:
            try:
                warnings._setoption(option)  # type: ignore[attr-defined]
            except warnings._OptionError as e:  # type: ignore[attr-defined]
                print(f"verl-compat: -W option {option!r} ignored: {e}", file=sys.stderr)
    return True


def uninstall() -> None:
    """Remove the finder from `sys.meta_path`."""
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
