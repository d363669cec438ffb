"""eve in a plain asyncio program: a session created, a message delivered, the session driven
to its next wait, the reply read from its events. `python worker.py "what time is it?"`.

Run it again with the session id it printed (`python worker.py MESSAGE SESSION`) to go on in
the same conversation: the session is durable, in ./.workflow-data (or EVE_WORLD).
"""

from __future__ import annotations

import asyncio
import os
import sys

from eve_cli.runtime import Runtime


async def main(message: str, session: str | None) -> None:
    runtime = Runtime(os.environ.get("EVE_WORLD"), os.environ.get("EVE_AGENT"))
    try:
        sid = session or await runtime.create_session()
        receipt = await runtime.deliver(sid, message)
        if receipt.disposition == "rejected":
            raise SystemExit(f"rejected: {receipt.reason}")
        await runtime.drive(sid)  # runs the turn until it ends or waits for a person
        replies = [e for e in runtime.events(sid) if e["type"] == "message.completed"]
        print(f"{sid}: {replies[-1].get('text', '') if replies else '(no reply)'}")
    finally:
        runtime.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
