"""The Typer application: global options, error handling, and the registry of command groups.

Each command group lives in its own module and registers itself through `register(app)`;
`COMMANDS` is the one place to add a group. A command's module is imported only when that
command runs (or for `--help` and completion, which list them all), so `eve inspect` never
imports what `eve chat` or `eve start` need.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from typer import _click as click
from typer._click import exceptions as click_exc
from typer.core import TyperGroup

from eve_cli._version import __version__
from eve_cli.cli._coerce import defer_coercion
from eve_cli.cli._context import DataOption, WorldOption, reset_state, state
from eve_cli.cli._errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, CliError

# Command name → the module under eve_cli.cli whose `register(app: typer.Typer) -> None` adds
# it, in help order. A module that does not exist adds nothing (its commands are absent).
COMMANDS: dict[str, str] = {
    "chat": "chat",
    "inspect": "inspect",
    "resume": "resume",
    "init": "init",
    "start": "serve",
    "dev": "serve",
    "gc": "gc",
    "doctor": "doctor",
    "log": "log",
    "mcp": "mcp",
    "fork": "fork",
    "session": "session",
    "replay": "replay",
    "export": "export",
    "schedules": "schedules",
    "eval": "eval",
    "token": "token",
}


class EveGroup(TyperGroup):
    """Loads a command's module when the command is asked for, and runs commands without
    Click's own error printing, so every failure is one line."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._loaded: set[str] = set()

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if cmd_name not in self.commands and module is not None:
            self._load(module)
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        for module in COMMANDS.values():
            self._load(module)
        order = list(COMMANDS)
        known = [name for name in order if name in self.commands]
        return known + [name for name in self.commands if name not in order]

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in COMMANDS:
            self.list_commands(ctx)  # an unknown name: every command, for "did you mean"
        return super().resolve_command(ctx, args)

    def _load(self, module: str) -> None:
        if module in self._loaded:
            return
        self._loaded.add(module)
        try:
            found = importlib.import_module(f"eve_cli.cli.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"eve_cli.cli.{module}":
                raise
            return
        group = typer.Typer()
        found.register(group)
        for info in group.registered_commands:
            cmd = typer.main.get_command_from_info(
                info,
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
            )
            if cmd.name and cmd.name not in self.commands:
                defer_coercion(cmd)
                self.commands[cmd.name] = cmd

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = _debug_first(list(sys.argv[1:] if args is None else args))
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


def _debug_first(argv: list[str]) -> list[str]:
    """``--debug`` is accepted after any command too (``eve chat --debug``): it is moved to
    the front, where the global option is parsed (never past a ``--``)."""
    end = argv.index("--") if "--" in argv else len(argv)
    if "--debug" not in argv[:end]:
        return argv
    rest = [arg for arg in argv[:end] if arg != "--debug"]
    return ["--debug", *rest, *argv[end:]]


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
    world: WorldOption = None,
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
    st.world = world
    if debug:
        import logging

        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
        for name in ("eve_cli", "world"):
            logging.getLogger(name).setLevel(logging.DEBUG)


command = typer.main.get_command(app)
defer_coercion(command)


def run(argv: list[str]) -> int:
    """Run the command line with `argv`; returns the exit code."""
    code: int = command.main(argv, prog_name="eve", standalone_mode=False)
    return code


__all__ = ["COMMANDS", "EveGroup", "app", "command", "run", "run_guarded"]
