"""eve_cli reaches storage only through the `World` interface, and `world` needs nothing of
eve_cli (SPEC §2): pinned on the source, so a shortcut around the interface fails here."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What only the local world's layout knows: its file and folder names, and telling worlds
# apart by their class name instead of asking the interface.
LAYOUT = re.compile(
    r"journal\.msgpack|inbox\.msgpack|head\.msgpack|owner\.lock|inbox\.lock|\.idx\b"
    r"|\.msgpack\b|[\"'](?:runs|streams|hooks|quarantine)[\"']|\b(?:runs|streams|hooks)/"
    r"|__name__\s*==\s*[\"']\w*World[\"']|FORMAT\b"
)


def _sources(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def test_no_path_of_the_local_layout_appears_in_eve_cli() -> None:
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in _sources("eve_cli")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if LAYOUT.search(line)
    ]
    assert found == []


def test_the_pattern_catches_a_path_of_the_layout() -> None:
    for line in (
        'os.path.join(d, "streams", f"{name}.msgpack")',
        'folder / "inbox.lock"',
        'type(world).__name__ == "MemoryWorld"',
        "data / 'runs' / sid",
    ):
        assert LAYOUT.search(line), line


def test_eve_cli_imports_from_world_only_its_public_surface() -> None:
    bad = []
    for path in _sources("eve_cli"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("world"):
                if node.module != "world":
                    bad.append(f"{path.relative_to(REPO)}: from {node.module} import ...")
            elif isinstance(node, ast.Import):
                bad += [
                    f"{path.relative_to(REPO)}: import {a.name}"
                    for a in node.names
                    if a.name.startswith("world.")
                ]
    assert bad == []


def test_world_imports_nothing_from_eve_cli() -> None:
    for path in _sources("world"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            assert not [n for n in names if n.split(".")[0] == "eve_cli"], path
    # And at run time: importing every module of world loads no eve_cli module.
    modules = [
        ".".join(p.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for p in _sources("world")
    ]
    code = (
        f"import sys, importlib\nfor m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'eve_cli'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]"


def test_a_world_written_outside_world_needs_only_its_public_names() -> None:
    """tests/outside_world.py implements the whole interface (every world-independent test
    runs on it) importing from `world` only what `world.__all__` offers."""
    import world

    path = REPO / "tests" / "outside_world.py"
    imported = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "world":
            assert node.module == "world", node.module
            imported += [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            assert not [a for a in node.names if a.name.split(".")[0] == "world"]
    assert imported and set(imported) <= set(world.__all__)
