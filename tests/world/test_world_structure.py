"""The shape of `world`, pinned: small modules, the storage interface in no import circle, one
sub-package per store that no other store and no core module reaches into.

No class is over 600 lines. `World`'s member count is today's, to shrink and never to grow (the
goal: at most 25)."""

from __future__ import annotations

import ast
from pathlib import Path

import world

ROOT = Path(world.__file__).parent
MODULE_MAX = 1000  # lines
CLASS_MAX = 600  # lines
WORLD_MEMBERS_MAX = 41  # `World`'s public members today (methods, attributes); the goal: 25
INTERFACE = "world._world"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of `world` that `name` imports anywhere (type-checking and function-level
    imports too: a circle through them is still one)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
    return {m for m in found if m in known and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def test_no_module_is_over_the_limit() -> None:
    sizes = {n: p.read_text(encoding="utf-8").count("\n") for n, p in _modules().items()}
    assert {n: s for n, s in sizes.items() if s > MODULE_MAX} == {}


def test_no_class_is_over_the_limit() -> None:
    large = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > CLASS_MAX:
                    large[f"{name}.{node.name}"] = length
    assert large == {}


def test_the_interface_is_in_no_import_circle() -> None:
    graph = _graph()
    reach, todo = set(), list(graph[INTERFACE])
    while todo:
        module = todo.pop()
        if module not in reach:
            reach.add(module)
            todo.extend(graph[module])
    assert INTERFACE not in reach, f"{INTERFACE} imports a module that imports it back"
    assert not any(m.startswith("world.stores") for m in reach)


def test_each_store_keeps_to_itself() -> None:
    """No store imports another, and the core imports none (only `world` itself and the
    choice of a store by URL or directory, `_select`, name them)."""
    graph = _graph()
    for name, imported in graph.items():
        stores = {m.split(".")[2] for m in imported if m.count(".") >= 2 and "stores" in m}
        if name.startswith("world.stores."):
            assert stores <= {name.split(".")[2]}, (name, imported)
        elif name not in {"world", "world._select"}:
            assert not stores, (name, imported)


def test_the_interface_does_not_grow() -> None:
    members = [m for m in vars(world.World) if not m.startswith("_")]
    assert len(members) <= WORLD_MEMBERS_MAX, sorted(members)
