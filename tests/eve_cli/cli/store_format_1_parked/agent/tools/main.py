from eve_cli import always, tool


@tool(approval=always())
def danger(x: int) -> int:
    """Needs approval."""
    return x
