"""Reproduce the codebase review's numbers (issue 16) with the standard library's ``ast``.

Run ``python scripts/review_metrics.py [PATH ...]`` (default: ``world eve_cli``). It prints:

- ``dict[str, Any]``: how often that annotation is written, and on how many lines;
- string-keyed accesses: subscripts ``x["k"]`` and calls ``x.get("k")`` / ``x.pop("k")`` /
  ``x.setdefault("k")`` with a string literal, their distinct keys, and how many of the accesses
  use a key of one or two characters;
- functions: count, median and 90th-percentile length in lines (``def`` to last line), and
  the largest one;
- the largest module in lines.
"""

from __future__ import annotations

import ast
import statistics
import sys
from collections import Counter
from pathlib import Path

_KEY_METHODS = frozenset({"get", "pop", "setdefault"})


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


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path("world"), Path("eve_cli")]
    for name, value in measure(roots).items():
        print(f"{name:24} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
