"""eve installs by its own name: the wheel and sdist `python -m build` makes install into a clean
virtual environment (pip) and with pipx, and the installed `eve` answers `--version` and runs a
demo chat; PostgreSQL is an extra, asked for in one line when missing."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from eve_cli import __version__

pytestmark = pytest.mark.slow  # builds and installs into fresh environments

ROOT = Path(__file__).resolve().parents[1]


def _clean_env(**more: str) -> dict[str, str]:
    """The environment without PYTHONPATH: the tests' points at this checkout, whose metadata
    would make pip take the wheel as installed already and the installed `eve` run this code."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **more}


def _run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=_clean_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _works(eve: Path, home: Path) -> None:
    assert _run(eve, "--version").strip() == f"eve {__version__}"
    home.mkdir()
    reply = _run(eve, "chat", "-p", "what time is it?", cwd=home)
    assert "It is" in reply
    missing = subprocess.run(
        [eve, "inspect", "--world", "postgresql://eve@127.0.0.1/eve"],
        cwd=home,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        "eve: error: a PostgreSQL world needs psycopg, which is not installed: "
        "pip install 'eve-durable[postgres]'"
    ]
    no_mcp = subprocess.run([eve, "mcp"], cwd=home, capture_output=True, text=True, timeout=60)
    assert no_mcp.returncode == 1
    assert no_mcp.stderr.strip().splitlines() == [
        "eve: error: MCP needs the mcp package, which is not installed: "
        "pip install 'eve-durable[mcp]'"
    ]


def test_the_distribution_has_a_name_of_its_own_and_one_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "eve-durable"
    assert "version" in project["dynamic"] and "version" not in project
    assert set(project["optional-dependencies"]) >= {"postgres", "otel", "mcp"}
    assert not [d for d in project["dependencies"] if d.startswith("mcp")]


@pytest.mark.timeout(900)  # two fresh environments, each installing every dependency
def test_the_wheel_installs_with_pip_and_pipx_and_runs(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
    wheels = sorted(dist.glob("eve_durable-*.whl"))
    assert [w.name for w in wheels] == [f"eve_durable-{__version__}-py3-none-any.whl"]
    assert len(list(dist.glob(f"eve_durable-{__version__}.tar.gz"))) == 1
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv)
    _run(venv / "bin" / "pip", "install", "-q", wheels[0])
    _works(venv / "bin" / "eve", tmp_path / "pip-home")
    pipx = {"PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    _run(sys.executable, "-m", "pipx", "install", wheels[0], env=pipx)
    _works(tmp_path / "bin" / "eve", tmp_path / "pipx-home")
