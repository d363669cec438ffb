"""Command-line values taken as they are when they already have their parameter's type.

Typer (0.29) converts every parameter's value with a Pydantic adapter built on first use, and
importing Pydantic's validators and building those adapters costs a read-only command about a
third of its CPU (`eve inspect`: ~0.1 s of ~0.3 s). Most values need no conversion: an option
left out is None, a default already has its type, a text argument is a ``str``, and a path is
``Path(text)`` with Typer's own checks (`coerce_cli_path`). :func:`defer_coercion` gives each
parameter of a command a converter that takes those as they are and asks Typer's own adapter
for anything else (a number typed on the command line, a choice, a list), so the results and
errors are Typer's. Without the Typer internals this needs, nothing changes.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

try:
    from typer._coercion import RuntimeParam, build_runtime_param
    from typer._param_types import coerce_cli_path, routes_to_path
    from typer.core import _TyperParameter
except ImportError:  # another Typer: its parameters convert their values themselves
    RuntimeParam = None  # type: ignore[assignment,misc]

__all__ = ["defer_coercion"]

_PLAIN = (str, int, float)  # taken as they are when a value already has the type


def _unwrapped(annotation: Any) -> Any:
    """``X`` of ``X | None`` (and of ``Optional[X]``); the annotation itself otherwise."""
    if get_origin(annotation) in (Union, types.UnionType):
        kinds = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(kinds) == 1:
            return kinds[0]
    return annotation


def _is_path(kind: Any, info: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, Path) and bool(routes_to_path(kind, info))


if RuntimeParam is not None:

    class _Deferred(RuntimeParam):
        """Takes a value that needs no conversion as it is; hands anything else to the
        converter Typer builds (once) for this parameter."""

        def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Any) -> Any:
            kind, info = _unwrapped(self.annotation), self.parameter_info
            if info.parser is None:
                if kind in _PLAIN and type(value) is kind and info.min is None and info.max is None:
                    return value
                if _is_path(kind, info) and isinstance(value, str) and info.path_type is None:
                    return coerce_cli_path(kind(value), info, path_type=kind, param=param, ctx=ctx)
            real = build_runtime_param(param.type_descriptor)
            param._runtime_param = real
            return real._coerce_value(value, param=param, ctx=ctx)


def defer_coercion(command: Any) -> None:
    """Give each Typer parameter of ``command`` (a Click command), and the help option it makes
    for each context, a deferred converter (see the module's docstring)."""
    if RuntimeParam is None:
        return
    _defer(command.params)
    make_help = command.get_help_option

    def help_option(ctx: Any) -> Any:
        option = make_help(ctx)
        _defer([option])
        return option

    command.get_help_option = help_option


def _defer(params: list[Any]) -> None:
    for param in params:
        if isinstance(param, _TyperParameter) and param._runtime_param is None:
            descriptor = param.type_descriptor
            param._runtime_param = _Deferred(
                parameter_info=descriptor.parameter_info, annotation=descriptor.annotation
            )
