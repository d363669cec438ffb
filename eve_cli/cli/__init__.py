"""The `eve` command line: one module per command group, thin, calling the core."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `eve` console script."""
    args = sys.argv[1:] if argv is None else argv
    # `--version` answers before Typer, Rich or the runtime are imported (SPEC §11: <= 0.3 s).
    if args[:1] in (["--version"], ["-V"]):
        from eve_cli._version import __version__

        print(f"eve {__version__}")
        return
    print("eve: commands are not available yet", file=sys.stderr)
    raise SystemExit(2)
