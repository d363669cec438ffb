"""The session's limits (tokens, time): a conversation parks to ask for more, a task fails."""

from __future__ import annotations

from eve_cli._session import PendingRequest
from eve_cli.harness._host import StepHost
from eve_cli.harness._outcome import StepResult


def check_limits(host: StepHost, index: int) -> StepResult | None:
    """Park (conversation) or fail (task) when the session's limits are exhausted."""
    snap = host.snap
    limits = host.agent.config.limits
    which = None
    if limits.tokens_per_session and snap.tokens >= (
        limits.tokens_per_session + snap.token_allowance
    ):
        which = "token"
    elif limits.session_timeout and host.now() - snap.created_at >= (
        limits.session_timeout + snap.time_allowance
    ):
        which = "time"
    if which is None:
        return None
    what = "tokens per session" if which == "token" else "session timeout"
    if snap.mode == "task":
        return StepResult("failed", f"limit reached: {what} (a task cannot ask to go on)")
    keys = host.turn.limit(index)
    request: PendingRequest = {
        "requestId": keys.id,
        "kind": "limit",
        "limit": which,
        "message": f"The session reached its limit ({what}). Continue?",
        "step": index,
    }
    snap.pending.append(request)
    data = {k: v for k, v in request.items() if k != "step"}
    data["kind"] = "approval"
    data["reason"] = "limit"
    host.emit("input.requested", data, keys.requested, index)
    return StepResult("park")
