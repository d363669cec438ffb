"""Deliveries taken by a running turn: steer / queue messages, input responses, cancel.

A delivery payload is a dict with ``kind``: ``message`` (``text``, ``policy`` steer|queue),
``responses`` (``responses``: ``[{"requestId", "approved", "always"} | {"requestId",
"answer"} | {"requestId", "outcome"[, "result"]}]``), ``cancel``, or a session operation
(``clear``, ``compact``, ``reset``, ``move``) which a running turn holds for the driver. A
message is delivered in a compact form, ``{"m": text[, "p": "queue"]}`` (stored once per
message in the session's inbox): :func:`expand_delivery` gives the form above, and is applied
to every payload taken from the hook.
"""

from __future__ import annotations

from typing import Any, Literal

from eve_cli._events import EventData
from eve_cli._json import JSONObject
from eve_cli._keys import Delivery
from eve_cli._session import (
    CompactMessage,
    Delivered,
    InputResponse,
    PendingRequest,
    Resolution,
)
from eve_cli.harness._effects import OUTCOME, outcome_answer
from eve_cli.harness._host import StepHost

Effect = Literal["none", "steered", "cancel"]


def compact_message(
    text: str, policy: str, output_schema: JSONObject | None = None
) -> CompactMessage:
    """The payload that delivers a user message (see :func:`expand_delivery`); ``o``: the
    JSON schema of the answer to the turn it starts."""
    payload: CompactMessage = {"m": text} if policy == "steer" else {"m": text, "p": policy}
    if output_schema is not None:
        payload["o"] = output_schema
    return payload


def expand_delivery(payload: Any) -> Any:
    """A delivery as the harness reads it: a compact message made whole, others as sent."""
    if isinstance(payload, dict) and "m" in payload and "kind" not in payload:
        whole: Delivered = {
            "kind": "message",
            "text": payload["m"],
            "policy": payload.get("p", "steer"),
        }
        if isinstance(payload.get("o"), dict):
            whole["outputSchema"] = payload["o"]
        if isinstance(payload.get("b"), dict):
            whole["b"] = payload["b"]  # who sent it (SPEC §18)
        return whole
    return payload


def with_ids(payloads: list[Any], ids: list[int]) -> list[Delivered]:
    """Payloads taken from the hook (``HookHandle.taken_ids``: their delivery ids), made whole;
    a message keeps its delivery id (``d``), which its ``message.received`` event names."""
    out: list[Delivered] = []
    for n, payload in enumerate(payloads):
        payload = expand_delivery(payload)
        if isinstance(payload, dict) and payload.get("kind") == "message" and n < len(ids):
            payload = {**payload, "d": ids[n]}
        out.append(payload)
    return out


def fold_message(
    host: StepHost,
    text: str,
    keys: Delivery,
    disposition: str,
    step: int | None,
    index: int | None = None,
    delivery: Any = None,
    by: Any = None,
) -> None:
    """A user message becomes part of the running turn (``index``: it is in history already).

    The event refers to the history item (``_h``) instead of copying the text; readers see
    the text (``execution._stored_events.EventReader``). ``delivery``: the message's delivery
    id (``deliveryId``: how its sender's receipt is told what became of it); ``by``: who sent
    it (SPEC §18), then the turn's principal.
    """
    if index is None:
        index = host.append_history({"role": "user", "content": text}, keys.user)
        held = text
    else:
        held = str(host.adopt_history(index).get("content") or "")
    data: EventData = {"_h": index, "disposition": disposition}
    if isinstance(delivery, int):
        data["deliveryId"] = delivery
    if isinstance(by, dict):
        data["by"] = by
        host.principal = by
    host.emit("message.received", data, keys.received, step, text=held)


def apply_delivery(
    host: StepHost, payload: Delivered, keys: Delivery, *, parked: bool, step: int | None
) -> Effect:
    """Apply one delivery to the running turn; says whether input was folded or cancel asked."""
    kind = payload.get("kind")
    if kind == "message":
        text = str(payload.get("text", ""))
        if payload.get("policy", "steer") == "steer" and not parked:
            fold_message(
                host, text, keys, "steered", step, delivery=payload.get("d"), by=payload.get("b")
            )
            return "steered"
        host.snap.queued.append(payload.copy())
        if isinstance(delivery := payload.get("d"), int):  # what its receipt reads
            host.emit("message.queued", {"deliveryId": delivery}, keys.queued, step)
        return "none"
    if kind == "responses":
        for response in payload.get("responses") or []:
            resolve(host, response, keys, step, payload.get("b"))
        return "none"
    if kind == "cancel":
        return "cancel"
    if kind in ("clear", "compact", "reset", "move"):
        host.snap.queued.append(payload.copy())
    return "none"


def resolve(
    host: StepHost, response: InputResponse, keys: Delivery, step: int | None, by: Any = None
) -> None:
    """Attach an answer to its pending request (``by``: who answered, kept in its
    ``input.resolved`` event); unknown or answered ids are ignored."""
    rid = response.get("requestId")
    for request in host.snap.pending:
        if request["requestId"] != rid or "resolution" in request:
            continue
        if request["kind"] == "question":
            resolution: Resolution = {"answer": str(response.get("answer", ""))}
        elif request["kind"] == OUTCOME:
            answered = outcome_answer(response)
            if answered is None:
                continue  # refused before it was sent (Runtime.respond); one stored by hand
            resolution = answered
        else:
            resolution = {"approved": bool(response.get("approved"))}
            if response.get("always") and resolution["approved"]:
                resolution["always"] = True
        request["resolution"] = resolution
        if request["kind"] == "approval" and resolution.get("approved"):
            _remember_approval(host, request.get("tool"), bool(resolution.get("always")))
        event = _resolved(request["requestId"], resolution)
        if isinstance(by, dict):
            event["by"] = by
        host.emit("input.resolved", event, keys.resolved(request["requestId"]), step)
        return


def _resolved(request_id: str, resolution: Resolution) -> EventData:
    """The data of an ``input.resolved`` event: the request and its resolution's fields (in
    the order they were set)."""
    event: EventData = {"requestId": request_id}
    if "answer" in resolution:
        event["answer"] = resolution["answer"]
    if "outcome" in resolution:
        event["outcome"] = resolution["outcome"]
    if "result" in resolution:
        event["result"] = resolution["result"]
    if "approved" in resolution:
        event["approved"] = resolution["approved"]
    if "always" in resolution:
        event["always"] = resolution["always"]
    return event


def _remember_approval(host: StepHost, tool: str | None, always: bool) -> None:
    """An approval of ``tool`` that holds for the session (``always``, or a tool asking
    ``once``) is remembered."""
    if not tool or tool in host.snap.approved_tools:
        return
    found = host.find_tool(tool)
    if always or (found is not None and found.approval.kind == "once"):
        host.snap.approved_tools.append(tool)


def cancel_pending(host: StepHost) -> None:
    """Mark every open request cancelled so its call gets a result (history stays valid)."""
    for request in host.snap.pending:
        if request["kind"] != "limit":
            request["kind"] = "cancelled"
        request["resolution"] = {"approved": False}
    host.snap.pending = [r for r in host.snap.pending if r["kind"] != "limit"]


def unresolved(host: StepHost) -> list[PendingRequest]:
    return [r for r in host.snap.pending if "resolution" not in r]
