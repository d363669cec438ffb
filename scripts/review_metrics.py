"""Reproduce the codebase review's numbers (issue 16) with the standard library's ``ast``.

Run ``python scripts/review_metrics.py [PATH ...]`` (default: ``world eve_cli``). It prints:

- ``dict[str, Any]``: how often that annotation is written, and on how many lines;
- string-keyed accesses: subscripts ``x["k"]`` and calls ``x.get("k")`` / ``x.pop("k")`` /
  ``x.setdefault("k")`` with a string literal, their distinct keys, and how many of the accesses
  use a key of one or two characters;
- functions: count, median and 90th-percentile length in lines (``def`` to last line), and
  the largest one;
- the largest module in lines;
- the gates of issue 33: the members of ``world.World``, functions of cyclomatic complexity
  over 15, classes over 400 and over 600 lines, imports of another package's private module
  (``from a.b._m import x`` outside ``a.b`` and its sub-packages), and ``dict[str, Any]``
  lines per package.

``tests/test_review_metrics.py`` pins the gates' counts so they only shrink.
"""

from __future__ import annotations

import ast
import statistics
import sys
from collections import Counter
from pathlib import Path

_KEY_METHODS = frozenset({"get", "pop", "setdefault"})
# What adds a path through a function (McCabe): a branch, a loop, a handler, a match case.
_DECISIONS = (
    ast.If,
    ast.IfExp,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.ExceptHandler,
    ast.match_case,
)


def _is_dict_str_any(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
        return False
    if node.value.id not in {"dict", "Dict"} or not isinstance(node.slice, ast.Tuple):
        return False
    names = [e.id if isinstance(e, ast.Name) else None for e in node.slice.elts]
    return names == ["str", "Any"]


def _string_key(node: ast.AST) -> str | None:
    if isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _KEY_METHODS
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


def measure(roots: list[Path]) -> dict[str, object]:
    """Walk every ``*.py`` under ``roots`` and return the review's figures."""
    dict_any = 0
    dict_any_lines: set[tuple[Path, int]] = set()
    keys: Counter[str] = Counter()
    lengths: list[int] = []
    largest = ("", 0)
    longest = ("", 0)  # the largest function: where, and its length
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            lines = text.count("\n")
            if lines > largest[1]:
                largest = (str(path), lines)
            for node in ast.walk(ast.parse(text, str(path))):
                if isinstance(node, ast.Subscript) and _is_dict_str_any(node):
                    dict_any += 1
                    dict_any_lines.add((path, node.lineno))
                key = _string_key(node)
                if key is not None:
                    keys[key] += 1
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    lengths.append(length)
                    if length > longest[1]:
                        longest = (f"{path}:{node.lineno} {node.name}", length)
    lengths.sort()
    return {
        "dict[str, Any]": f"{dict_any} (on {len(dict_any_lines)} lines)",
        "string-keyed accesses": sum(keys.values()),
        "distinct string keys": len(keys),
        "accesses by 1-2 char key": sum(n for k, n in keys.items() if len(k) <= 2),
        "distinct 1-2 char keys": sum(1 for k in keys if len(k) <= 2),
        "functions": len(lengths),
        "function length median": statistics.median(lengths) if lengths else 0,
        "function length p90": lengths[int(len(lengths) * 0.9)] if lengths else 0,
        "largest function": f"{longest[0]} ({longest[1]} lines)",
        "largest module": f"{largest[0]} ({largest[1]} lines)",
    }


def _package(path: Path, root: Path) -> str:
    """The dotted package a module file under ``root`` belongs to (``__init__`` included)."""
    return ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])


def _private_module(dotted: str) -> tuple[str, str] | None:
    """``(owner package, private module)`` when ``dotted`` goes through a ``_name`` part."""
    parts = dotted.split(".")
    for n, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:n]), ".".join(parts[: n + 1])
    return None


def _imported(node: ast.AST, package: str) -> list[str]:
    """The dotted names an import statement reaches (its module, or each name it takes)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    module = node.module or ""
    if node.level:
        base = package.split(".")[: len(package.split(".")) - node.level + 1]
        module = ".".join([*base, *([module] if module else [])])
    if _private_module(module):
        return [module]
    return [f"{module}.{alias.name}" for alias in node.names]


def _is_module(base: Path, dotted: str) -> bool:
    """``dotted`` names a module or package under ``base`` (not a name inside a module)."""
    where = base.joinpath(*dotted.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def private_imports(roots: list[Path]) -> list[tuple[str, str]]:
    """``(file, module)`` for each private module a file imports from another package (one
    not its own and not one of its ancestors: a package's private modules serve it and its
    sub-packages). Imports under ``TYPE_CHECKING`` count too."""
    tops = {root.name for root in roots}
    found: set[tuple[str, str]] = set()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            package = _package(path, root)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                for dotted in _imported(node, package):
                    private = _private_module(dotted)
                    if private is None or private[0].split(".")[0] not in tops:
                        continue
                    if not _is_module(root.parent, private[1]):
                        continue  # a private name of a public module: that module's business
                    owner = private[0]
                    if package != owner and not package.startswith(owner + "."):
                        found.add((str(path.relative_to(root.parent)), private[1]))
    return sorted(found)


def complexity(node: ast.AST) -> int:
    """McCabe's number of a function: 1 + its decision points (nested functions apart)."""
    count = 1
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if isinstance(child, _DECISIONS):
            count += 1
        elif isinstance(child, ast.BoolOp):
            count += len(child.values) - 1
        elif isinstance(child, ast.comprehension):
            count += 1 + len(child.ifs)
        stack.extend(ast.iter_child_nodes(child))
    return count


def gates(roots: list[Path]) -> dict[str, object]:
    """The figures ``tests/test_review_metrics.py`` pins (see the module's docstring)."""
    classes: list[tuple[int, str]] = []
    complex_functions: list[str] = []
    world_members: int | None = None
    dict_lines: Counter[str] = Counter()
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            lines: set[int] = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    classes.append((size, f"{path}:{node.lineno} {node.name}"))
                    if node.name == "World" and root.name == "world":
                        world_members = sum(
                            isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
                            for member in node.body
                        )
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if (cc := complexity(node)) > 15:
                        complex_functions.append(f"{path}:{node.lineno} {node.name} ({cc})")
                elif isinstance(node, ast.Subscript) and _is_dict_str_any(node):
                    lines.add(node.lineno)
            dict_lines[root.name] += len(lines)
    imports = private_imports(roots)
    return {
        "World members": world_members,
        "functions complexity > 15": complex_functions,
        "classes over 400 lines": sorted(c for c in classes if c[0] > 400),
        "classes over 600 lines": sorted(c for c in classes if c[0] > 600),
        "private imports": imports,
        "dict[str, Any] lines": dict(dict_lines),
    }


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path("world"), Path("eve_cli")]
    for name, value in measure(roots).items():
        print(f"{name:24} {value}")
    for name, value in gates(roots).items():
        if isinstance(value, list):
            print(f"{name:24} {len(value)}")
            for item in value:
                print(f"    {item}")
        else:
            print(f"{name:24} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
