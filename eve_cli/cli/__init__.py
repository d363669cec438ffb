"""The `eve` command line: one module per command group, thin, calling the core.

`app.py` holds the Typer application and the registry of command groups; `chat`, `inspect`,
`resume` and `init` are command modules; `_render*` turn session events into terminal, plain or
NDJSON output. Only `eve_cli` (runtime facade, agent API) and `world` are imported from here.
"""

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
    from eve_cli.cli.app import run

    raise SystemExit(run(list(args)))
