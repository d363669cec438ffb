"""YAML case files read with the line of every value, so each mistake names its file:line.

`read_yaml` gives plain Python values where mappings are `Located` (a dict that knows the line
of itself and of each of its keys) and sequences `LocatedList` (the line of each item).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class CaseFileError(ValueError):
    """A mistake in a case file; ``str()`` is one line, ``file:line: what``."""

    def __init__(self, path: Path | str, line: int, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        super().__init__(f"{path}:{line}: {message}")


class Located(dict[str, Any]):
    """A mapping of a case file: ``line`` is where it starts, ``lines[key]`` where a key is."""

    line: int = 0
    lines: dict[str, int]

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.line) if hasattr(self, "lines") else self.line


class LocatedList(list[Any]):
    """A sequence of a case file: ``line`` is where it starts, ``lines[i]`` where item i is."""

    line: int = 0
    lines: list[int]

    def line_of(self, index: int) -> int:
        lines = getattr(self, "lines", [])
        return lines[index] if index < len(lines) else self.line


def line_of(value: Any, default: int) -> int:
    """Where ``value`` starts when it is a mapping or sequence of a case file."""
    return int(getattr(value, "line", 0) or default)


def read_yaml(path: Path) -> Any:
    """The document of ``path`` with lines kept.

    Raises:
        CaseFileError: the file cannot be read or is not YAML (at the line of the mistake).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseFileError(path, 1, f"cannot read the file: {exc}") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        what = " ".join(str(p) for p in (exc.context, exc.problem) if p)
        raise CaseFileError(path, line, f"not valid YAML: {what}") from None
    except yaml.YAMLError as exc:
        raise CaseFileError(path, 1, f"not valid YAML: {exc}") from None
    return None if node is None else _value(path, node)


def _value(path: Path, node: yaml.Node) -> Any:
    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        mapping = Located()
        mapping.line, mapping.lines = line, {}
        for key_node, value_node in node.value:
            key = _scalar(path, key_node)
            if not isinstance(key, str):
                where = key_node.start_mark.line + 1
                raise CaseFileError(path, where, f"key {key!r}: keys are names")
            if key in mapping:
                raise CaseFileError(path, key_node.start_mark.line + 1, f"{key!r} given twice")
            mapping[key] = _value(path, value_node)
            mapping.lines[key] = key_node.start_mark.line + 1
        return mapping
    if isinstance(node, yaml.SequenceNode):
        items = LocatedList(_value(path, item) for item in node.value)
        items.line, items.lines = line, [item.start_mark.line + 1 for item in node.value]
        return items
    return _scalar(path, node)


def _scalar(path: Path, node: yaml.Node) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise CaseFileError(path, node.start_mark.line + 1, "a key must be a plain name")
    try:
        return yaml.SafeLoader("").construct_object(node, deep=True)
    except yaml.YAMLError as exc:
        raise CaseFileError(path, node.start_mark.line + 1, f"bad value: {exc}") from None
