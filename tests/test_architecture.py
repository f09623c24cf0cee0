"""The shape of the code, kept by tests: no import cycle, no reaching into another object's private
attributes, faces that use only the facade and the value types, every mutation returning what it
changed, and files of a size a reader can hold in their head (issue "a thin Vault over an unlocked
session").  The layers themselves are an import-linter contract in ``pyproject.toml``, run by
``tests/test_boundaries.py``."""

from __future__ import annotations

import ast
import pathlib
import sys
import typing

import grimp
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORE = ROOT / "core" / "camillo"

# obj._name where obj is not self/cls: the few places where it is the honest thing, each with why.
REACH_IN_ALLOWED: dict[tuple[str, str], str] = {
    ("primitives.py", "other._buf"): "SecretBytes.__eq__ compares two secrets in constant time without copying",
}

FACES = ("camillo.cli", "camillo.mcp_server", "camillo.importers", "camillo.exporters", "camillo.tour", "camillo.demo")
# What a face may import from the core: the package itself, the facade, the value types, and other faces.
FACE_VOCABULARY = ("camillo", "camillo.vault", "camillo.values", "camillo.changes", "camillo.errors", *FACES)

VAULT_MUTATIONS = ("append", "confirm", "reject", "resolve", "forget", "erase", "revoke", "compact", "create_grant",
                   "change_passphrase", "set_policy", "reissue_recovery_phrase", "refresh", "accept_current_state")


def _cycles(package: str) -> list[list[str]]:
    graph = grimp.build_graph(package)  # function-level (lazy) imports included
    mods = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    edges = {m: sorted(d for d in graph.find_modules_directly_imported_by(m) if d in mods) for m in mods}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for m in mods:
        if m not in index:
            visit(m)
    return found


def test_no_import_cycle_in_the_core():
    assert _cycles("camillo") == []


def _reach_ins() -> list[tuple[str, int, str]]:
    out = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") and node.attr.endswith("__"):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            out.append((rel, node.lineno, ast.unparse(node)))
    return out


def test_no_module_reaches_into_another_objects_private_attributes():
    found = [(rel, line, text) for rel, line, text in _reach_ins() if (rel, text) not in REACH_IN_ALLOWED]
    assert not found, "use (or add) a public method or attribute instead of:\n" + "\n".join(
        f"  {rel}:{line}: {text}" for rel, line, text in found)
    assert len(REACH_IN_ALLOWED) <= 25
    stale = set(REACH_IN_ALLOWED) - {(rel, text) for rel, _, text in _reach_ins()}
    assert not stale, f"allowed reach-ins that no longer exist: {stale}"


def test_the_reach_in_scan_finds_what_it_must():
    tree = ast.parse("def f(vault):\n    return vault._vms\n")
    hits = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")]
    assert [ast.unparse(h) for h in hits] == ["vault._vms"]


def _imports_of(path: pathlib.Path, package: str) -> list[tuple[int, str]]:
    """Absolute module names a file imports (relative imports resolved against ``package``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            # "from . import x" may name submodules
            if node.module is None or node.level:
                out += [(node.lineno, f"{mod}.{a.name}") for a in node.names if (CORE.parent / (
                    f"{mod}.{a.name}".replace(".", "/") + ".py")).exists()]
    return out


def _module_name(path: pathlib.Path, top: pathlib.Path, name: str) -> str:
    rel = path.relative_to(top).with_suffix("")
    parts = [name, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_the_faces_use_only_the_facade_and_the_value_types():
    wrong = []
    for path in sorted(CORE.rglob("*.py")):
        mod = _module_name(path, CORE, "camillo")
        if not any(mod == f or mod.startswith(f + ".") for f in FACES):
            continue
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for line, imported in _imports_of(path, package):
            if not imported.startswith("camillo"):
                continue
            if not any(imported == ok or (imported.startswith(ok + ".") and ok in FACES) for ok in FACE_VOCABULARY):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {imported}")
    assert not wrong, "faces go through camillo.Vault and camillo.values:\n" + "\n".join(wrong)


def test_the_desktop_imports_only_the_camillo_package():
    wrong = []
    for path in sorted((ROOT / "camillo_desktop").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            wrong += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                      if n.startswith("camillo.") and not n.startswith("camillo_desktop")]
    assert not wrong, "the desktop uses only what `camillo` exports:\n" + "\n".join(wrong)


@pytest.mark.parametrize("name", VAULT_MUTATIONS)
def test_every_mutation_of_the_vault_returns_changes(name):
    from camillo import Changes, Vault

    hints = typing.get_type_hints(getattr(Vault, name))
    result = hints["return"]
    if result is Changes:
        return
    fields = typing.get_type_hints(result)
    assert fields.get("changes") is Changes, f"Vault.{name} returns {result}, which holds no Changes"


def test_files_stay_small_enough_to_read():
    sizes = {p.relative_to(CORE).as_posix(): len(p.read_text().splitlines()) for p in CORE.rglob("*.py")}
    assert sizes["vault.py"] <= 600, sizes["vault.py"]
    big = {name: n for name, n in sizes.items() if n > 900}
    assert not big, big
