import subprocess
import sys

from eve_cli import __version__


def test_version_answers_without_importing_the_runtime() -> None:
    code = (
        "import sys; from eve_cli.cli import main; main(['--version']);"
        "heavy = [m for m in ('typer', 'rich', 'world', 'pydantic') if m in sys.modules];"
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [f"eve {__version__}", "[]"]
