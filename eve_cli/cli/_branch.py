"""`/fork` and `/rewind [N]` in `eve chat`: go on in a fork of the session (SPEC §15).

Both fork the session (`Facade.fork`) and switch the chat to the fork; the original stays as
it is, reachable with `eve chat -s ID`. `/fork` forks at the latest checkpoint; `/rewind N`
after turn (turns − N), and says which turns it left behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eve_cli.cli._events import one_line

if TYPE_CHECKING:
    from eve_cli.cli._chat_loop import ChatLoop
    from eve_cli.cli._render import Renderer

USAGE = "usage: /rewind [N] (N turns back, default 1) or /fork"


def branch(command: str, chat_loop: ChatLoop, renderer: Renderer) -> None:
    """Run `/fork` or `/rewind [N]`: fork, switch to the fork, say what was left behind."""
    words = command.split()
    rt, old = chat_loop.backend, chat_loop.sid
    at, left = None, ""
    if words[0].lower() == "/rewind":
        if len(words) > 2 or (len(words) == 2 and not words[1].isdigit()):
            renderer.notice(USAGE)
            return
        back = int(words[1]) if len(words) == 2 else 1
        view = rt.session(old, max(1, back))  # its latest turns: those left behind
        turns, count = view["turns"], view.get("turnCount", len(view["turns"]))
        if not 1 <= back <= count:
            renderer.notice(f"cannot go back {back} turn(s): session {old} has {count}")
            return
        at = str(count - back)
        gone = [f"“{one_line(t.get('input') or '', 40)}”" for t in turns[len(turns) - back :]]
        left = f"left behind {back} turn(s) of {old} ({', '.join(gone)}); "
    try:
        out = chat_loop.call(lambda: rt.fork(old, at))
    except Exception as exc:
        if not _refused(exc):
            raise
        renderer.notice(f"cannot fork {old}: {exc}")
        return
    new = str(out["sessionId"])
    last = rt.events(new, -1)
    index = last[-1].get("index") if last else None
    chat_loop.sid = new
    chat_loop.next_index = index + 1 if isinstance(index, int) else 0  # only what comes now
    renderer.notice(
        f"{left}now in {new}, a fork of {old} at checkpoint {out['checkpoint']} "
        f"(the original stays: eve chat -s {old})"
    )
    chat_loop.settle()  # a fork inside a turn finishes it first


def _refused(exc: BaseException) -> bool:
    """A refusal the chat reports and goes on after: no such checkpoint, a malformed one, or
    a server's 4xx answer saying so."""
    return isinstance(exc, LookupError | ValueError) or getattr(exc, "status", 0) in (400, 409)
