"""``eve eval --replay``: the sessions of the last run played again against the current agent
code with their recorded model answers and tool results (no model is called, no tool runs:
`eve replay`'s machinery), their divergences reported and the expectations checked again on
what the replay did. A judge is not asked again: its recorded verdict stands while the reply
is the one it judged."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from eve_cli.evals._case import Case
from eve_cli.evals._expect import check_run
from eve_cli.evals._outcome import read_run
from eve_cli.evals._runner import ResultEntry

if TYPE_CHECKING:
    from eve_cli.runtime import Runtime


async def replay_result(
    reader: Runtime, case: Case, recorded: ResultEntry, agent_dir: Path
) -> ResultEntry:
    """Replay the session of one recorded repetition (``recorded``: its report entry)."""
    from eve_cli._cassette import cassette
    from eve_cli._replay import play

    sid = str(recorded["session"])
    events = await reader.call(reader.events, sid)
    tape = cassette(sid, events, agent=None, model=reader.stored_model(sid))
    found = await play(tape, agent_dir)
    run = read_run(sid, found.events)
    failures = check_run(case.expect, run)
    verdict = recorded.get("judge")
    if case.expect.judge is not None:
        if run.reply != recorded.get("reply"):
            failures.append(
                "the reply changed since it was judged: run eve eval without "
                "--replay to judge it again"
            )
        elif verdict is None or not verdict.get("passed"):
            reason = verdict.get("reason") if verdict is not None else None
            failures.append(f"judge (recorded): {reason or 'failed'}")
    divergences = [d.as_dict() for d in found.divergences]
    return {
        "run": recorded.get("run"),
        "case": case.name,
        "repeat": recorded.get("repeat", 0),
        "session": sid,
        "passed": not failures and not divergences,
        "failures": failures,
        "divergences": divergences,
        "reply": run.reply,
        "steps": run.steps,
        "tokens": recorded.get("tokens"),
        "cost": recorded.get("cost"),
        "seconds": recorded.get("seconds"),
        "judge": verdict,
        "status": "replayed",
    }
