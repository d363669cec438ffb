"""The session's budgets (tokens, time, cost; per session and per turn): a conversation parks
to ask "continue (+N) or stop", a task fails naming the budget."""

from __future__ import annotations

from eve_cli._session import PendingRequest, Snapshot, requested_event
from eve_cli.harness._host import StepHost
from eve_cli.harness._outcome import StepResult

# limit -> what it is called, how a grant reads
_NAMES = {
    "token": "tokens per session",
    "time": "session timeout",
    "cost": "cost per session",
    "turn_token": "tokens per turn",
    "turn_cost": "cost per turn",
}


def reached(host: StepHost) -> tuple[str, float] | None:
    """The first budget used up, with its size (what going on grants), or None."""
    # Each amount used only for a budget that is set: asked at every step, most sessions
    # have none, and the clock is read only for a timeout.
    snap, limits = host.snap, host.agent.config.limits
    budget: float | None
    if (budget := limits.tokens_per_session) and snap.tokens - snap.token_allowance >= budget:
        return "token", float(budget)
    if (budget := limits.session_timeout) and (
        host.now() - snap.created_at - snap.time_allowance >= budget
    ):
        return "time", float(budget)
    if (budget := limits.cost_per_session) and snap.cost - snap.cost_allowance >= budget:
        return "cost", float(budget)
    if (budget := limits.tokens_per_turn) and snap.tokens - snap.turn_tokens >= budget:
        return "turn_token", float(budget)
    if (budget := limits.cost_per_turn) and snap.cost - snap.turn_cost >= budget:
        return "turn_cost", float(budget)
    return None


def check_limits(host: StepHost, index: int) -> StepResult | None:
    """Park (conversation) or fail (task) when one of the session's budgets is used up."""
    found = reached(host)
    if found is None:
        return None
    which, grant = found
    snap, what = host.snap, _NAMES[which]
    if snap.mode == "task":
        amount = _amount(which, grant)
        return StepResult("failed", f"limit reached: {what} ({amount}; a task cannot ask to go on)")
    keys = host.turn.limit(index)
    request: PendingRequest = {
        "requestId": keys.id,
        "kind": "limit",
        "limit": which,
        "grant": grant,
        "message": f"Budget reached: {what}. Continue (+{_amount(which, grant)}) or stop?",
        "step": index,
    }
    snap.pending.append(request)
    data = requested_event(request)
    data["kind"] = "approval"
    data["reason"] = "limit"
    host.emit("input.requested", data, keys.requested, index)
    return StepResult("park")


def _amount(which: str, grant: float) -> str:
    if which.endswith("cost"):
        return f"${grant:g}"
    if which == "time":
        return f"{grant:g} s"
    return f"{int(grant)} tokens"


def grant_more(host: StepHost, which: str) -> None:
    """Going on past budget ``which``: a fresh budget of the same size, counted from now."""
    snap: Snapshot = host.snap
    if which == "token":
        snap.token_allowance = snap.tokens
    elif which == "time":
        snap.time_allowance = host.now() - snap.created_at
    elif which == "cost":
        snap.cost_allowance = snap.cost
    elif which == "turn_token":
        snap.turn_tokens = snap.tokens
    elif which == "turn_cost":
        snap.turn_cost = snap.cost
