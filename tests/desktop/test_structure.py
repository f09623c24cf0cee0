"""The desktop's module structure: no import cycle among the modules of ``camillo_desktop``, counting
the imports made inside functions (grimp sees those too), so that a cycle cannot hide behind a lazy
import.  A cycle is reported with the line of every import on it."""

from __future__ import annotations

import textwrap

import grimp
import pytest


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iteratively: the strongly connected components of ``graph`` (node ->
    the nodes it points to), each sorted, every node in exactly one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, ())))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def import_cycles(package: str) -> list[str]:
    """Every import cycle among the modules of ``package``: one line per strongly connected
    component of more than one module, showing one cycle through it with each import's line."""
    graph = grimp.build_graph(package, cache_dir=None)
    modules = {m for m in graph.modules if m == package or m.startswith(package + ".")}
    edges = {m: graph.find_modules_directly_imported_by(m) & modules for m in modules}
    cycles = []
    for component in strongly_connected(edges):
        if len(component) < 2:
            continue
        first, members = component[0], set(component)
        # A shortest way back to the first module from one it imports, within the component.
        back = min((graph.find_shortest_chain(importer=m, imported=first) or () for m in edges[first] & members),
                   key=lambda chain: len(chain) or 10**6)
        chain = (first, *back)
        steps = []
        for importer, imported in zip(chain, chain[1:]):
            details = graph.get_import_details(importer=importer, imported=imported)
            where = ", ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details)
            steps.append(f"  {importer} -> {imported}  ({where})")
        cycles.append(f"{len(component)} modules in a cycle: {', '.join(component)}\n" + "\n".join(steps))
    return cycles


def test_the_desktop_has_no_import_cycle():
    cycles = import_cycles("camillo_desktop")
    assert not cycles, "import cycles in camillo_desktop (move the code where it belongs):\n" + "\n".join(cycles)


def test_strongly_connected_components():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e", "d"}}
    assert sorted(strongly_connected(graph)) == [["a", "b", "c"], ["d"], ["e"]]
    chain = {str(i): {str(i + 1)} for i in range(5000)}  # deep: no recursion limit
    assert len(strongly_connected(chain)) == 5001


def test_a_cycle_through_a_function_level_import_is_found(tmp_path, monkeypatch):
    package = tmp_path / "cyclic_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("from . import second\n")
    (package / "second.py").write_text(textwrap.dedent("""
        def later():
            from .first import something  # a lazy import still makes the cycle
            return something
    """))
    (package / "alone.py").write_text("from . import first\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cycles = import_cycles("cyclic_probe")
    assert len(cycles) == 1
    assert "cyclic_probe.first, cyclic_probe.second" in cycles[0]
    assert "line 3: from .first import something" in cycles[0]
    assert "alone" not in cycles[0]


@pytest.mark.parametrize("importer, imported", [("camillo_desktop.dialogs", "camillo_desktop.keychain"),
                                                ("camillo_desktop.views.devices", "camillo_desktop.keychain")])
def test_the_keychain_wording_is_shared_not_borrowed_from_a_view(importer, imported):
    """(dialogs -> views.devices -> flows -> dialogs was a cycle: the settings dialog borrowed the
    devices view's keychain_name.)"""
    graph = grimp.build_graph("camillo_desktop", cache_dir=None)
    assert graph.direct_import_exists(importer=importer, imported=imported)
    assert not graph.direct_import_exists(importer="camillo_desktop.dialogs", imported="camillo_desktop.views.devices")
