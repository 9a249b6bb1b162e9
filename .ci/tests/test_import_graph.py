"""No import circles between the modules of any dist (`verl_core`, `verl_omni`, `verl_compat`, `verl_migrate`).

The graph is grimp's (the library import-linter builds on): every `import` statement counts, at module level, inside
a function (lazy) or under `if TYPE_CHECKING:`. A circle is a strongly connected component of more than one module.
There is no allowed exception (issue 34's last ones, `verl_omni.config` <-> `algos.registry`, engine <-> its updates,
`trainer.report` <-> `tracking`, `verl_compat` <-> `_finder` / `_serve`, are gone).

Mutations run by hand: `from verl_omni.trainer.tracking import CONSOLE_KEYS` added to `trainer/report.py`:
`[verl_omni]` FAILED naming report:16 -> tracking and tracking:23 -> report; `from verl_compat import
VerlDeprecationWarning` put back in `verl_compat/_serve.py`: `[verl_compat]` FAILED naming the four modules.
"""

from __future__ import annotations

import grimp
import pytest

GATED = ["verl_core", "verl_omni", "verl_compat", "verl_migrate"]


def import_circles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Return each set of modules of `package` that import each other in a circle (sorted, largest first)."""
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    edges = {m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d in modules) for m in modules}
    # Tarjan's strongly connected components, iterative (no recursion limit on deep chains)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(modules):
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return sorted(circles, key=lambda c: (-len(c), c))


def describe(graph: grimp.ImportGraph, circle: list[str]) -> str:
    """The imports inside one circle, one per line, as `importer:line -> imported  (statement)`."""
    members = set(circle)
    lines = []
    for importer in circle:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(f"  {importer}:{detail['line_number']} -> {imported}  ({detail['line_contents']})")
    return "\n".join(lines)


@pytest.mark.parametrize("package", GATED)
def test_import_graph_has_no_circles(package: str) -> None:
    graph = grimp.build_graph(package, cache_dir=None)
    circles = import_circles(graph, package)
    report = "\n".join(f"circle {sorted(c)}:\n{describe(graph, c)}" for c in circles)
    assert not circles, f"{package} has {len(circles)} import circle(s); move the shared piece down:\n{report}"


def test_import_circles_finds_a_circle_and_nothing_else() -> None:
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d", "other"):
        graph.add_module(module)
    graph.add_import(importer="pkg.a", imported="pkg.b")
    graph.add_import(importer="pkg.b", imported="pkg.c")
    graph.add_import(importer="pkg.c", imported="pkg.a")  # a -> b -> c -> a
    graph.add_import(importer="pkg.d", imported="pkg.a")  # d hangs off the circle
    graph.add_import(importer="pkg.d", imported="other")
    graph.add_import(importer="other", imported="pkg.d")  # outside `pkg`: not followed
    assert import_circles(graph, "pkg") == [["pkg.a", "pkg.b", "pkg.c"]]
    graph.remove_import(importer="pkg.c", imported="pkg.a")
    assert import_circles(graph, "pkg") == []
