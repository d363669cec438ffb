"""Regenerate `.workflow-data.example/`: a real run of the built-in agent on the `demo` model.

    python -m eve_cli.cli.example [--out DIR]

Several turns with a tool call, an approval (approved) and a question (answered), written by the
current code. The folder is a format-compatibility fixture (a test opens it with every later
version) and shows the on-disk layout; inspect it with `eve inspect --data .workflow-data.example`.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eve_cli._facade import Facade

if TYPE_CHECKING:
    from eve_cli.execution import PendingView

MESSAGES = (
    "hello",
    "what time is it?",
    "remember to buy milk",
    "ask me a question",
    "count the words in the quick brown fox",
)
ANSWER = "blue"
DEFAULT_OUT = Path(__file__).resolve().parents[2] / ".workflow-data.example"


async def converse(rt: Facade) -> str:
    """Run the example conversation; returns the session id."""
    sid = await rt.create_session()
    for message in MESSAGES:
        await rt.deliver(sid, message)
        view = await rt.drive(sid)
        while view.get("status") == "parked" and view.get("pending"):
            await rt.respond(sid, [_answer(request) for request in view["pending"]])
            view = await rt.drive(sid)
    return sid


def _answer(request: PendingView) -> dict[str, Any]:
    if request.get("kind") == "question":
        return {"requestId": request["requestId"], "answer": ANSWER}
    return {"requestId": request["requestId"], "approved": True, "always": False}


def generate(out: Path) -> str:
    """Write a fresh example data directory at `out` (replacing it); returns the session id."""
    from eve_cli.runtime import Runtime

    out = out.resolve()
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".example-") as tmp:
        staging = Path(tmp) / "data"
        sid = asyncio.run(converse(Runtime(data_dir=staging)))
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    return sid


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m eve_cli.cli.example", description=__doc__)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="target folder")
    args = parser.parse_args(argv)
    sid = generate(args.out)
    print(f"wrote {args.out} (session {sid}); see: eve inspect --data {args.out} {sid}")


if __name__ == "__main__":
    main()
