"""The Typer application: global options, error handling, and the registry of command groups.

Each command group lives in its own module and registers itself through `register(app)`;
`_COMMAND_MODULES` is the one place to add a group (the channel adds `start`/`dev`, later
`gc`/`doctor`).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from typer._click import exceptions as click_exc
from typer.core import TyperGroup

from eve_cli._version import __version__
from eve_cli.cli._context import DataOption, reset_state, state
from eve_cli.cli._errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, CliError

# Modules under eve_cli.cli that define `register(app: typer.Typer) -> None`, in help order.
_COMMAND_MODULES: tuple[str, ...] = ("chat", "inspect", "resume", "init")
# Optional groups owned by other parts (serve.py → `eve start`/`eve dev`, gc.py, doctor.py),
# registered when their module exists.
_OPTIONAL_MODULES: tuple[str, ...] = ("serve", "gc", "doctor")


class EveGroup(TyperGroup):
    """Runs commands without Click's own error printing, so every failure is one line."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        reset_state()
        code = run_guarded(
            lambda: super(EveGroup, self).main(
                argv, prog_name or "eve", complete_var, standalone_mode=False, **extra
            ),
            debug="--debug" in argv,
        )
        if standalone_mode:
            sys.exit(code)
        return code


def run_guarded(call: Callable[[], Any], debug: bool) -> int:
    """Run `call`, turning every outcome into an exit code and at most one stderr line."""
    try:
        result = call()
    except CliError as exc:
        _error(exc.message, exc.prefix)
        return exc.code
    except click_exc.UsageError as exc:
        if exc.format_message():  # empty when the help was shown for a bare `eve`
            where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            _error(f"{exc.format_message()}{where}")
        return EXIT_USAGE
    except click_exc.ClickException as exc:
        _error(exc.format_message())
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        _error("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:
        if debug or state().debug:
            traceback.print_exc()
        else:
            _error(f"{type(exc).__name__}: {exc} (run with --debug for the traceback)")
        return EXIT_ERROR
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    return 0


def _error(message: str, prefix: str = "error: ") -> None:
    sys.stderr.write(f"eve: {prefix}{message}\n")
    sys.stderr.flush()


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"eve {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="eve",
    cls=EveGroup,
    help="eve: durable agents that survive kill -9, restarts and reloads.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _global(
    data: DataOption = None,
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks and internal detail on errors.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    st = state()
    st.debug = debug
    st.data = data
    if debug:
        import logging

        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
        for name in ("eve_cli", "world"):
            logging.getLogger(name).setLevel(logging.DEBUG)


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(f"eve_cli.cli.{name}").register(app)
    for name in _OPTIONAL_MODULES:
        try:
            module = importlib.import_module(f"eve_cli.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"eve_cli.cli.{name}":
                raise
            continue
        module.register(app)


_register_all()
command = typer.main.get_command(app)


def run(argv: list[str]) -> int:
    """Run the command line with `argv`; returns the exit code."""
    code: int = command.main(argv, prog_name="eve", standalone_mode=False)
    return code


__all__ = ["EveGroup", "app", "command", "run", "run_guarded"]
