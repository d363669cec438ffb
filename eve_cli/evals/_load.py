"""Finding and reading the cases of an agent folder: ``evals/*.yaml`` (``*.yml``) and
``evals/*.py`` (cases made with `case()`), checked against the agent's tools."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eve_cli.evals._case import Case, Check
from eve_cli.evals._parse import FileDefaults, parse_case
from eve_cli.evals._yamlfile import CaseFileError, read_yaml

if TYPE_CHECKING:
    from eve_cli._loader import AgentDefinition

FILE_KEYS = frozenset(("cases", "model", "judge_model", "tags"))
BUILT_IN_TOOLS = frozenset(("ask_question", "sleep"))


class CaseErrors(ValueError):
    """Mistakes in case files, one ``file:line: what`` line each."""

    def __init__(self, errors: list[CaseFileError]) -> None:
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


@dataclass(frozen=True)
class CaseSpec:
    """A case made by `case()` in a Python case file, and the line that made it."""

    fields: dict[str, Any]
    file: str
    line: int


_collecting = threading.local()


def case(**fields: Any) -> CaseSpec:
    """Declare a case in ``evals/*.py``: the keywords are the keys of a YAML case (``check=``
    may be a function)."""
    frame = sys._getframe(1)
    spec = CaseSpec(fields, frame.f_code.co_filename, frame.f_lineno)
    found = getattr(_collecting, "specs", None)
    if found is not None:
        found.append(spec)
    return spec


def case_files(agent_dir: Path) -> list[Path]:
    folder = agent_dir / "evals"
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix in (".yaml", ".yml", ".py") and not p.name.startswith(("_", "."))
    )


def load_cases(agent_dir: Path, agent: AgentDefinition | None = None) -> list[Case]:
    """Every case of ``agent_dir/evals``; ``agent``: its definition, whose tools the stubs
    and tool expectations must name.

    Raises:
        CaseErrors: every mistake found, one line each.
    """
    cases: list[Case] = []
    errors: list[CaseFileError] = []
    for path in case_files(agent_dir):
        try:
            found, wrong = _read(path)
        except CaseFileError as exc:
            errors.append(exc)
            continue
        cases += found
        errors += wrong
    errors += _duplicates(cases)
    if agent is not None:
        errors += [e for c in cases if (e := _unknown_tool(c, agent)) is not None]
    if errors:
        raise CaseErrors(errors)
    return cases


def _read(path: Path) -> tuple[list[Case], list[CaseFileError]]:
    if path.suffix == ".py":
        return _parse_all(
            path,
            [(s.fields, s.line) for s in _run_python(path)],
            FileDefaults(),
            _python_checks(path),
        )
    document = read_yaml(path)
    defaults, items = _yaml_items(path, document)
    return _parse_all(path, items, defaults, _file_checks(path))


def _parse_all(
    path: Path,
    items: list[tuple[Any, int]],
    defaults: FileDefaults,
    find_check: Callable[[Any, int], tuple[Check, str]],
) -> tuple[list[Case], list[CaseFileError]]:
    cases, errors = [], []
    for data, line in items:
        try:
            cases.append(parse_case(path, data, line, defaults, find_check))
        except CaseFileError as exc:
            errors.append(exc)
    if not items and not errors and path.suffix != ".py":  # a .py may hold only checks
        errors.append(CaseFileError(path, 1, "no cases in this file"))
    return cases, errors


def _yaml_items(path: Path, document: Any) -> tuple[FileDefaults, list[tuple[Any, int]]]:
    from eve_cli.evals._case import Fields

    if isinstance(document, list):
        return FileDefaults(), [(v, document.line_of(i)) for i, v in enumerate(document)]  # type: ignore[attr-defined]
    if document is None:
        return FileDefaults(), []
    f = Fields(path, document, 1, "file")
    if "cases" not in f.data and "name" in f.data:  # one case alone
        return FileDefaults(), [(document, f.line)]
    f.only(FILE_KEYS)
    if not isinstance(f.get("cases"), list):
        raise f.fail("cases", "a case file has 'cases:', a list of cases")
    defaults = FileDefaults(f.text("model"), f.text("judge_model"), f.texts("tags"))
    if defaults.model is not None or defaults.judge_model is not None:
        from eve_cli.evals._parse import _model

        defaults = FileDefaults(
            _model(f, "model", defaults.model),
            _model(f, "judge_model", defaults.judge_model),
            defaults.tags,
        )
    return defaults, f.items("cases")


def _run_python(path: Path) -> list[CaseSpec]:
    """Import a Python case file and collect the cases it declares."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    name = f"eve_evals_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CaseFileError(path, 1, "cannot import this file")
    module = importlib.util.module_from_spec(spec)
    _collecting.specs = []
    try:
        sys.modules[name] = module
        spec.loader.exec_module(module)
        specs: list[CaseSpec] = _collecting.specs
    except SyntaxError as exc:
        raise CaseFileError(path, exc.lineno or 1, f"SyntaxError: {exc.msg}") from None
    except Exception as exc:
        raise CaseFileError(
            path, _failing_line(path, exc), f"{type(exc).__name__}: {exc}"
        ) from None
    finally:
        _collecting.specs = None
    return [s for s in specs if Path(s.file).resolve() == path.resolve()]


def _failing_line(path: Path, exc: BaseException) -> int:
    lines = [
        f.lineno
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve() == path.resolve()
    ]
    return (lines[-1] or 1) if lines else 1


def python_check(value: Any, line: int) -> tuple[Check, str]:
    """A check given as a function (Python, not a case file)."""
    if not callable(value):
        raise CaseFileError("<expect>", line, f"check {value!r} must be a function")
    return value, getattr(value, "__name__", repr(value))


def _python_checks(path: Path) -> Callable[[Any, int], tuple[Check, str]]:
    files = _file_checks(path)

    def find(value: Any, line: int) -> tuple[Check, str]:
        if callable(value):
            return value, getattr(value, "__name__", repr(value))
        return files(value, line)

    return find


def _file_checks(path: Path) -> Callable[[Any, int], tuple[Check, str]]:
    """A check named ``FILE.py:FUNCTION`` (FILE relative to the case file)."""

    def find(value: Any, line: int) -> tuple[Check, str]:
        if not isinstance(value, str) or ":" not in value or not value.partition(":")[2]:
            raise CaseFileError(path, line, f"check {value!r}: name it FILE.py:FUNCTION")
        file, _, function = value.rpartition(":")
        source = (path.parent / file).resolve()
        if not source.is_file():
            raise CaseFileError(path, line, f"check {value!r}: no file {source}")
        module = _import_checks(source, path, line)
        found = getattr(module, function, None)
        if not callable(found):
            raise CaseFileError(path, line, f"check {value!r}: no function {function!r} in {file}")
        return found, value

    return find


def _import_checks(source: Path, path: Path, line: int) -> Any:
    name = "eve_eval_checks_" + hashlib.sha1(str(source).encode()).hexdigest()[:10]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, source)
    if spec is None or spec.loader is None:
        raise CaseFileError(path, line, f"cannot import {source}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        where = f"{source}:{_failing_line(source, exc)}"
        raise CaseFileError(path, line, f"{where}: {type(exc).__name__}: {exc}") from None
    sys.modules[name] = module
    return module


def _duplicates(cases: list[Case]) -> list[CaseFileError]:
    seen: dict[str, Case] = {}
    errors = []
    for c in cases:
        if c.name in seen:
            errors.append(
                CaseFileError(
                    c.file, c.line, f"case {c.name!r} is already defined at {seen[c.name].where}"
                )
            )
        seen.setdefault(c.name, c)
    return errors


def _unknown_tool(c: Case, agent: AgentDefinition) -> CaseFileError | None:
    from eve_cli.mcp import server_of

    tools: set[str] = set()
    servers: set[str] = set()
    folders = [agent]
    while folders:  # a sub-agent's tools can be stubbed too
        one = folders.pop()
        tools |= set(one.tools) | set(one.subagents)
        servers |= {spec.name for spec in one.mcp}
        folders += one.subagents.values()
    for name, line in c.tool_refs:
        if name not in tools | BUILT_IN_TOOLS and server_of(name) not in servers:
            listed = ", ".join(sorted(tools)) or "none"
            what = f"case {c.name!r}: the agent has no tool {name!r} (its tools: {listed})"
            return CaseFileError(c.file, line, what)
    return None


def select(cases: list[Case], names: list[str], tags: list[str]) -> list[Case]:
    """The cases named (a name, or a glob) or tagged; all when neither is given.

    Raises:
        ValueError: a name matches no case.
    """
    import fnmatch

    if not names and not tags:
        return cases
    chosen = [c for c in cases if set(tags) & set(c.tags)] if tags else []
    for name in names:
        hits = [c for c in cases if fnmatch.fnmatchcase(c.name, name)]
        if not hits:
            raise ValueError(f"no case named {name!r} (cases: {', '.join(c.name for c in cases)})")
        chosen += hits
    return list({c.name: c for c in chosen}.values())
