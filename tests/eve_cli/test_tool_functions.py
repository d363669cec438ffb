"""Tools: schema from type hints, validation, sync/async, ctx injection, errors as results."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from eve_cli import ToolContext, tool
from eve_cli._tools import ToolDefinitionError, build_tool

T = TypeVar("T")


class Point(BaseModel):
    x: int
    y: int


@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


@tool(name="where", approval=None)
async def locate(p: Point, ctx: ToolContext) -> dict[str, object]:
    """Async tool with a model argument and the context."""
    ctx.report_progress("locating")
    return {"sum": p.x + p.y, "call": ctx.call_id}


@tool
def explode(reason: str) -> str:
    """Always fails."""
    raise RuntimeError(reason)


def ctx() -> ToolContext:
    return ToolContext(session_id="s", call_id="c1", idempotency_key="s:t1:c1")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def test_schema_from_hints_and_docstring() -> None:
    built = build_tool(add)
    assert built.description == "Add two numbers."
    assert built.parameters["properties"] == {
        "a": {"type": "integer"},
        "b": {"default": 1, "type": "integer"},
    }
    assert built.parameters["required"] == ["a"]
    where = build_tool(locate)
    assert where.name == "where"
    properties = where.parameters["properties"]
    assert isinstance(properties, dict) and "ctx" not in properties
    assert where.ctx_param == "ctx"


def test_valid_call_runs_and_renders_json() -> None:
    assert run(build_tool(add).execute({"a": 2, "b": 3}, ctx())).content == "5"
    context = ctx()
    result = run(build_tool(locate).execute({"p": {"x": 1, "y": 2}}, context))
    assert result.content == '{"sum": 3, "call": "c1"}'
    assert context.progress_messages == ["locating"]


@pytest.mark.parametrize(
    "arguments, expected",
    [
        ({"a": "not a number"}, "a: Input should be a valid integer"),
        ({}, "a: Field required"),
        ({"a": 1, "zzz": 2}, "zzz: Extra inputs are not permitted"),
        (None, "arguments must be a JSON object"),
    ],
)
def test_invalid_arguments_become_error_results(arguments: object, expected: str) -> None:
    result = run(build_tool(add).execute(arguments, ctx()))  # type: ignore[arg-type]
    assert result.is_error
    assert expected in result.content


def test_exception_becomes_error_result() -> None:
    result = run(build_tool(explode).execute({"reason": "boom"}, ctx()))
    assert result.is_error
    assert "RuntimeError: boom" in result.content


def test_missing_type_hint_is_a_definition_error() -> None:
    def untyped(a, b: int) -> int:  # type: ignore[no-untyped-def]
        return b

    with pytest.raises(ToolDefinitionError, match=r"parameter 'a' has no type hint"):
        build_tool(tool(untyped))


def test_sync_tools_run_on_tool_threads_and_a_brief_wait_holds_the_loop() -> None:
    import contextvars
    import threading
    import time

    from eve_cli._tool_threads import run_sync

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    def where(pause: float = 0.0) -> tuple[str, str]:
        time.sleep(pause)
        return threading.current_thread().name, var.get()

    async def main() -> None:
        var.set("caller's")
        turned: list[bool] = []
        asyncio.get_running_loop().call_soon(turned.append, True)
        name, seen = await run_sync(where, {}, wait=5.0)
        assert name.startswith("eve-tool") and seen == "caller's"
        assert turned == []  # taken within the wait: the loop did not turn meanwhile
        assert await run_sync(where, {}) == (name, "caller's")  # no wait: awaited on the loop
        assert turned == [True]
        asyncio.get_running_loop().call_soon(turned.append, True)
        await run_sync(where, {"pause": 0.2}, wait=0.01)  # longer than the wait: awaited
        assert turned == [True, True]

    asyncio.run(main())


def test_tool_threads_are_capped_and_calls_beyond_the_cap_wait_their_turn() -> None:
    import threading
    import time

    from eve_cli._tool_threads import ToolThreads

    running, most = [0], [0]
    lock = threading.Lock()

    def job(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return i

    pool = ToolThreads(idle=0.2, most=3)
    futures = [pool.submit(lambda i=i: job(i)) for i in range(10)]  # type: ignore[misc]
    assert [f.result(timeout=10) for f in futures] == list(range(10))
    assert most[0] == 3  # never more than the cap at once (10 unbounded), and it was used
    again = [pool.submit(lambda i=i: i) for i in range(5)]  # type: ignore[misc]
    assert [f.result(timeout=10) for f in again] == list(range(5))


def test_an_instant_sync_tool_runs_on_the_callers_thread_until_it_holds_the_loop() -> None:
    import contextvars
    import threading
    import time

    from eve_cli._tool_threads import _QUICK, INLINE_AFTER, run_sync

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    pause = [0.0]

    def where() -> tuple[str, str, bool]:
        time.sleep(pause[0])
        try:
            asyncio.get_running_loop()
            seen_loop = True
        except RuntimeError:
            seen_loop = False
        return threading.current_thread().name, var.get(), seen_loop

    def nested() -> tuple[str, int]:
        async def inner() -> int:
            return 7

        # asyncio.run works on a thread, so it must work inline too
        return threading.current_thread().name, asyncio.run(inner())

    async def until_inline(fn: Callable[[], tuple[Any, ...]], me: str) -> tuple[int, Any]:
        # On a loaded machine a run can take longer than INLINE_LIMIT, which starts the count
        # again: run until the rule lets `fn` inline, and say how many thread runs that took.
        for runs in range(INLINE_AFTER * 25):
            got = await run_sync(fn, {}, wait=1.0)
            if got[0] == me:
                return runs, got
        raise AssertionError(f"{fn.__name__} never ran on the caller's thread")

    async def main() -> None:
        var.set("caller's")
        me = threading.current_thread().name
        runs, got = await until_inline(where, me)
        assert runs >= INLINE_AFTER  # proven on threads first
        assert got == (me, "caller's", False)
        assert (await run_sync(where, {}))[0] != me  # a caller that cannot wait: a thread
        runs, got = await until_inline(nested, me)
        assert runs >= INLINE_AFTER
        assert got == (me, 7)
        asyncio.get_running_loop()  # the caller's loop is visible again
        while _QUICK.get(where, 0) < INLINE_AFTER:  # trusted again, however slow the last run
            await until_inline(where, me)
        pause[0] = 0.05  # longer than the wait below: it held the loop once
        assert (await run_sync(where, {}, wait=0.01))[0] == me
        pause[0] = 0.0
        for _ in range(INLINE_AFTER + 2):  # quick again, but no longer trusted
            assert (await run_sync(where, {}, wait=1.0))[0] != me

    asyncio.run(main())


def test_a_sync_tool_that_waits_on_the_loop_never_runs_inline() -> None:
    import threading

    from eve_cli._tool_threads import INLINE_AFTER, run_sync

    loop_box: list[asyncio.AbstractEventLoop] = []

    def bridged() -> str:
        async def answer() -> str:
            return "from the loop"

        # Waits for the caller's loop: held by the caller, this takes at least the wait, so
        # the tool is never proven instant (inline, it would wait for itself forever).
        value = asyncio.run_coroutine_threadsafe(answer(), loop_box[0]).result(timeout=5)
        return f"{value} on {threading.current_thread().name}"

    async def main() -> None:
        loop_box.append(asyncio.get_running_loop())
        for _ in range(INLINE_AFTER + 3):  # quick when the loop is free (a caller not alone)
            assert (await run_sync(bridged, {})).startswith("from the loop on eve-tool")
        for _ in range(INLINE_AFTER + 3):  # held by the caller: never proven instant
            result = await run_sync(bridged, {}, wait=0.002)
            assert result.startswith("from the loop on eve-tool")

    asyncio.run(main())


def test_tool_threads_end_when_idle_and_every_job_runs() -> None:
    import threading
    import time

    from eve_cli._tool_threads import ToolThreads

    # The threads of this pool only: the process's own pool ends its idle threads meanwhile.
    def tool_threads() -> int:
        return sum(t.name == "eve-tool-under-test" for t in threading.enumerate())

    pool = ToolThreads(idle=0.2, name="eve-tool-under-test")
    futures = [pool.submit(lambda i=i: i * i) for i in range(50)]  # type: ignore[misc]
    assert [f.result(timeout=5) for f in futures] == [i * i for i in range(50)]
    slow = [pool.submit(lambda: time.sleep(0.3)) for _ in range(3)]  # at once: three threads
    for future in slow:
        future.result(timeout=5)
    failing = pool.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=5)
    deadline = time.monotonic() + 5
    while tool_threads() > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tool_threads() == 0  # no thread is left waiting (D5)
    assert pool.submit(lambda: "again").result(timeout=5) == "again"
