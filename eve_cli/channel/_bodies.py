"""Request bodies of the channel: size-limited JSON reading and validation of each field.

Every problem is a :class:`ChannelError` (400, or 413 for a body over the limit) whose message
names the field at fault.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request

from eve_cli._facade import ReceiptBody, TurnPolicy
from eve_cli._json import JSONObject, JSONValue
from eve_cli._session import InputResponse
from eve_cli._text import bad_text
from eve_cli.channel._errors import ChannelError


async def read_json(
    request: Request, limit: int, allow_empty: bool = False, timeout: float = 30.0
) -> JSONObject:
    """The body as a JSON object; an empty body is ``{}`` when ``allow_empty``. A body not
    complete within ``timeout`` seconds is a 408 (a client trickling it holds a connection)."""
    try:
        async with asyncio.timeout(timeout):
            raw = await _read_limited(request, limit)
    except TimeoutError:
        raise ChannelError(408, f"the request body did not arrive within {timeout:g} s") from None
    if not raw.strip():
        if allow_empty:
            return {}
        raise ChannelError(400, "the request needs a JSON object body")
    try:
        body: JSONValue = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ChannelError(400, f"malformed JSON body: {exc}") from None
    except RecursionError:  # nesting deep enough to exhaust the parser's stack
        raise ChannelError(400, "malformed JSON body: nested too deeply") from None
    if not isinstance(body, dict):
        raise ChannelError(400, "the JSON body must be an object")
    if (problem := bad_text(body)) is not None:  # a "\\ud800" escape: no UTF-8 form to store
        raise ChannelError(400, f"the body's field {problem}")
    return body


async def _read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ChannelError(413, f"request body of {declared} bytes exceeds the {limit}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ChannelError(413, f"request body exceeds the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def optional_str(body: JSONObject, key: str) -> str | None:
    value = body.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ChannelError(400, f"'{key}' must be a string")


def output_schema(body: JSONObject) -> JSONObject | None:
    """``outputSchema``: the JSON schema the answer to the turn a message starts follows."""
    value = body.get("outputSchema")
    if value is None or isinstance(value, dict):
        return value
    raise ChannelError(400, "'outputSchema' must be a JSON schema object")


def turn_policy(body: JSONObject) -> TurnPolicy:
    policy = body.get("turnPolicy", "steer")
    if policy == "steer":
        return "steer"
    if policy == "queue":
        return "queue"
    raise ChannelError(400, f"turnPolicy must be 'steer' or 'queue', got {policy!r}")


def input_responses(value: JSONValue) -> list[InputResponse]:
    """Validate ``inputResponses``: approvals ``{requestId, approved, always?}``, answers
    ``{requestId, answer}`` or an interrupted call's outcome ``{requestId, outcome,
    result?}`` (its values are checked against the request by the runtime)."""
    if not isinstance(value, list) or not value:
        raise ChannelError(400, "'inputResponses' must be a non-empty list")
    return [_input_response(item, f"inputResponses[{i}]") for i, item in enumerate(value)]


def _input_response(item: JSONValue, where: str) -> InputResponse:
    request_id = item.get("requestId") if isinstance(item, dict) else None
    if not isinstance(item, dict) or not isinstance(request_id, str):
        raise ChannelError(400, f"{where} must be an object with a string 'requestId'")
    if "approved" in item:
        approved, always = item["approved"], item.get("always", False)
        if not isinstance(approved, bool) or not isinstance(always, bool):
            raise ChannelError(400, f"{where}: 'approved' and 'always' must be booleans")
        return {"requestId": request_id, "approved": approved, "always": always}
    if isinstance(answer := item.get("answer"), str):
        return {"requestId": request_id, "answer": answer}
    if "outcome" in item:  # an interrupted call: rerun | failed | result (+ result)
        outcome, result = item["outcome"], item.get("result", "")
        if not isinstance(outcome, str) or not isinstance(result, str):
            raise ChannelError(400, f"{where}: 'outcome' and 'result' must be strings")
        out: InputResponse = {"requestId": request_id, "outcome": outcome}
        if "result" in item:
            out["result"] = result
        return out
    raise ChannelError(
        400, f"{where} needs 'approved' (bool), 'answer' (string) or 'outcome' (string)"
    )


def receipt_body(receipt: Any) -> ReceiptBody:
    """The JSON form of a delivery receipt (attribute or mapping shaped)."""
    if isinstance(receipt, dict):
        disposition, reason = receipt.get("disposition"), receipt.get("reason")
    else:
        disposition = getattr(receipt, "disposition", None)
        reason = getattr(receipt, "reason", None)
    out: ReceiptBody = {"disposition": str(disposition)}
    if reason:
        out["reason"] = str(reason)
    return out
