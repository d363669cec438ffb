"""Running cases as real sessions: each repetition of a case is one session, created with an
operation id made of the run, the case and the repetition, so a run resumed after a kill finds
the session it had (and carries on from what its events say) instead of making another."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from eve_cli.evals._case import Answer, Case
from eve_cli.evals._expect import check_run
from eve_cli.evals._judge import JudgeRecord, judge_model, run_judge
from eve_cli.evals._outcome import CaseRun, read_run
from eve_cli.evals._stubs import StubBook, stubbed

if TYPE_CHECKING:
    from eve_cli._replay import DivergenceRecord
    from eve_cli._session import InputResponse
    from eve_cli.execution import PendingView
    from eve_cli.runtime import Runtime

_MAX_ROUNDS = 256  # drives of one case: bounds a case whose agent asks forever
_ENDED = ("completed", "failed", "cancelled")


class ResultEntry(TypedDict):
    """One repetition's line in the results and the report."""

    run: str | None
    case: str
    repeat: int
    session: str
    passed: bool
    failures: list[str]
    reply: str
    steps: int | None
    tokens: int | None
    cost: float | None
    seconds: float | None
    judge: JudgeRecord | None
    status: str
    divergences: NotRequired[list[DivergenceRecord]]  # a replay's


# Called with each finished repetition's result (the progress display).
OnResult = Callable[[Case, ResultEntry], None]


@dataclass(frozen=True)
class EvalOptions:
    """How to run the cases."""

    jobs: int = 1
    repeat: int = 1
    model: str | None = None  # instead of each case's and the agent's
    judge_model: str | None = None  # for judges that name no model


def session_operation(run_id: str, case: str, repeat: int) -> str:
    return f"eve-eval:{run_id}:{case}:{repeat}"


async def run_case(
    rt: Runtime,
    case: Case,
    *,
    run_id: str = "adhoc",
    repeat: int = 0,
    options: EvalOptions | None = None,
    book: StubBook | None = None,
) -> CaseRun:
    """Run (or finish) one repetition of ``case`` as a session of ``rt``: the run, with the
    expectations it misses (``failures``, one line each) and the judge's verdict.
    ``book``: where the case's stubs are served from (`serve_stubs`)."""
    options = options or EvalOptions()
    sid = await rt.create_session(
        mode=case.mode,
        model=options.model or case.model,
        operation_id=session_operation(run_id, case.name, repeat),
        meta={"eval": {"run": run_id, "case": case.name, "repeat": repeat}},
    )
    if book is not None:
        book.set(sid, case.stubs)
    stopped, view = await converse(rt, sid, case)
    run = read_run(sid, await rt.call(rt.events, sid))
    run.stopped, run.view, run.status = stopped, view, str(view.get("status"))
    run.failures = check_run(case.expect, run)
    if case.expect.judge is not None:
        run.judge, problem = await _judge(case, run, options)
        run.failures += problem
    return run


def serve_stubs(rt: Runtime, cases: Sequence[Case]) -> StubBook:
    """Serve ``rt``'s agent and its sub-agents (each a folder of its own) with their tools
    wrapped to answer the cases' stubs."""
    book = StubBook()
    if any(c.stubs for c in cases):
        rt.executor.pin(rt.agent_dir, stubbed(rt.agent, book))
        subagents = list(rt.agent.subagents.values())
        while subagents:
            sub = subagents.pop()
            rt.executor.pin(sub.directory, stubbed(sub, book))
            subagents += sub.subagents.values()
    return book


async def _judge(
    case: Case, run: CaseRun, options: EvalOptions
) -> tuple[JudgeRecord | None, list[str]]:
    judge = case.expect.judge
    assert judge is not None
    model = judge_model(case, judge, options.judge_model)
    if model is None:
        return None, [
            "no judge model: set judge.model, judge_model in the case file, "
            "--judge-model or EVE_JUDGE_MODEL"
        ]
    verdict = await run_judge(case, judge, run.reply, model)
    if verdict.passed:
        return verdict.as_dict(), []
    score = "no score" if verdict.score is None else f"score {verdict.score:g}"
    return verdict.as_dict(), [f"judge ({model}): {score} < {judge.min_score:g}: {verdict.reason}"]


@dataclass
class _Place:
    """How far a case's session is: messages delivered and answers given. Counted from its
    events once for a session this process did not start (a resumed run), then kept."""

    received: int = 0
    resolved: int = 0
    known: bool = False

    async def learn(self, rt: Runtime, sid: str) -> None:
        if self.known:
            return
        events = await rt.call(lambda: rt.events(sid, texts=False))
        self.received = sum(1 for e in events if e.get("type") == "message.received")
        self.resolved = sum(1 for e in events if e.get("type") == "input.resolved")
        self.known = True


async def converse(rt: Runtime, sid: str, case: Case) -> tuple[str | None, Mapping[str, Any]]:
    """Drive the session through the case's messages and answers, from wherever its events
    say it is; (why it stopped early or None, its last view)."""
    view: Mapping[str, Any] = {}
    place = _Place()
    if not await rt.call(rt.ever_delivered, sid):  # new: its first message, then one drive
        place.known = True
        problem = await _deliver(rt, sid, case, place)
        if problem:
            return problem, view
    for _ in range(_MAX_ROUNDS):
        view = await rt.drive(sid)
        status = str(view.get("status"))
        if status in _ENDED:
            return None, view
        await place.learn(rt, sid)
        if status == "parked" and view.get("pending"):
            problem = await _respond(rt, sid, case, list(view["pending"]), place)
        elif status != "waiting":
            problem = f"the session stopped {status} ({view.get('parkedOn')})"
        elif place.received >= len(case.messages):
            return None, view
        else:
            problem = await _deliver(rt, sid, case, place)
        if problem:
            return problem, view
    return f"the case did not settle in {_MAX_ROUNDS} rounds", view


async def _deliver(rt: Runtime, sid: str, case: Case, place: _Place) -> str | None:
    receipt = await rt.deliver(sid, case.messages[place.received])
    place.received += 1
    if receipt.disposition == "rejected":
        return f"message {place.received} was rejected: {receipt.reason}"
    return None


async def _respond(
    rt: Runtime, sid: str, case: Case, pending: list[PendingView], place: _Place
) -> str | None:
    responses = []
    for i, request in enumerate(pending):
        index = place.resolved + i
        given = case.answers[index] if index < len(case.answers) else None
        response = _response(request, given)
        if isinstance(response, str):
            return response
        responses.append(response)
    receipt = await rt.respond(sid, responses)
    if receipt.disposition == "rejected":
        return f"the answers were rejected: {receipt.reason}"
    place.resolved += len(responses)
    return None


def _response(request: PendingView, given: Answer | None) -> InputResponse | str:
    kind = request.get("kind")
    asked = (
        f"approval of {request.get('tool')}({_args(request.get('arguments'))})"
        if kind == "approval"
        else f"the question {request.get('question')!r}"
    )
    if given is None:
        return f"asked for {asked} with no answer left in the case (add one to 'answers')"
    if kind == "approval" and given.approve is not None:
        if given.tool and given.tool != request.get("tool"):
            return f"asked for {asked}, but the answer at line {given.line} is for {given.tool!r}"
        return {"requestId": request["requestId"], "approved": given.approve}
    if kind == "question" and given.text is not None:
        return {"requestId": request["requestId"], "answer": given.text}
    return f"asked for {asked}, but the answer at line {given.line} is not one for it"


def _args(arguments: Any) -> str:
    import json

    return json.dumps(arguments, default=str)[:100]


def result_entry(run_id: str, case: Case, repeat: int, run: CaseRun) -> ResultEntry:
    """One repetition's line in the results and the report."""
    return {
        "run": run_id,
        "case": case.name,
        "repeat": repeat,
        "session": run.session_id,
        "passed": run.passed,
        "failures": run.failures,
        "reply": run.reply,
        "steps": run.steps,
        "tokens": run.tokens,
        "cost": run.cost,
        "seconds": round(run.seconds, 3),
        "judge": run.judge,
        "status": run.status,
    }


async def run_cases(
    rt: Runtime,
    cases: Sequence[Case],
    options: EvalOptions,
    run_id: str,
    done: Mapping[tuple[str, int], ResultEntry],
    record: Callable[[ResultEntry], None],
    on_result: OnResult | None = None,
) -> dict[tuple[str, int], ResultEntry]:
    """Run every repetition of ``cases`` not in ``done``, ``options.jobs`` at a time; each
    result is given to ``record`` (made durable) before ``on_result`` (shown)."""
    book = serve_stubs(rt, cases)
    results = dict(done)
    gate = asyncio.Semaphore(max(1, options.jobs))

    async def one(case: Case, n: int) -> None:
        async with gate:
            run = await run_case(rt, case, run_id=run_id, repeat=n, options=options, book=book)
        entry = result_entry(run_id, case, n, run)
        record(entry)
        results[(case.name, n)] = entry
        if on_result is not None:
            on_result(case, entry)

    todo = [(c, n) for c in cases for n in range(options.repeat) if (c.name, n) not in done]
    await asyncio.gather(*(one(c, n) for c, n in todo))
    return results
