"""HTTP plumbing shared by the providers: retries, backoff, stream timeouts and error lines.

A call is a sequence of attempts. An attempt fails with :class:`CallError` (a
:class:`ModelError`) that says whether it may be retried and after how long the server asked us
to wait. Retried: 408, 409, 429, 5xx and 529, dropped connections, stalled streams and
``overloaded`` stream errors. Not retried: 400, 401, 403, 404, quota-exhausted 429s, and
anything the server marks ``x-should-retry: false``.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from eve_cli.models._base import DeltaCallback, ModelError
from eve_cli.models._sse import SSEDecoder, SSEEvent

T = TypeVar("T")

#: Event name :func:`stream_sse` yields when the server answered with one JSON body instead.
WHOLE_BODY = "eve.whole-body"

_NEVER_RETRY = frozenset({400, 401, 403, 404})
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
_PREFIX = "EVE_MODEL_"


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """How a provider retries and when it gives up on a silent stream.

    ``first_chunk_timeout`` bounds the wait from sending the request to the first body bytes;
    ``chunk_timeout`` bounds each later silence. Server-requested delays above
    ``max_retry_after`` are replaced by our own backoff. ``sleep`` is how waits happen.
    """

    max_retries: int = 4
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 60.0
    first_chunk_timeout: float = 120.0
    chunk_timeout: float = 60.0
    connect_timeout: float = 10.0
    sleep: Callable[[float], Awaitable[None]] = field(default=_sleep, repr=False, compare=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RetryPolicy:
        """Defaults, overridden by ``EVE_MODEL_MAX_RETRIES``, ``..._RETRY_BASE_DELAY``,
        ``..._FIRST_CHUNK_TIMEOUT`` and ``..._CHUNK_TIMEOUT`` (ignored when not numbers)."""
        default = cls()

        def number(name: str, otherwise: float) -> float:
            try:
                value = float(env.get(_PREFIX + name) or "-1")
            except ValueError:
                return otherwise
            return value if value >= 0 else otherwise

        return cls(
            max_retries=int(number("MAX_RETRIES", default.max_retries)),
            base_delay=number("RETRY_BASE_DELAY", default.base_delay),
            first_chunk_timeout=number("FIRST_CHUNK_TIMEOUT", default.first_chunk_timeout),
            chunk_timeout=number("CHUNK_TIMEOUT", default.chunk_timeout),
        )

    def backoff(self, attempt: int) -> float:
        """Exponential delay before retry ``attempt`` (0-based), with up to 25% jitter off."""
        delay = min(self.base_delay * 2**attempt, self.max_delay)
        return float(delay * (1 - 0.25 * random.random()))


class CallError(ModelError):
    """An attempt failed; ``retry_after`` is the wait the server asked for, if any."""

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(provider, message, status=status, retryable=retryable)
        self.retry_after = retry_after


def one_line(text: str, secrets: Iterable[str] = (), limit: int = 300) -> str:
    """``text`` on one line, shortened, with every secret replaced by ``***``: whole, split by
    whitespace or escaped line breaks (an error body wrapping it), or any piece of it of
    :data:`SECRET_PIECE` characters or more (an answer that cut it short)."""
    text = redact(text, secrets)
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: The shortest run of a secret's characters that is redacted on its own.
SECRET_PIECE = 10


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret (see :func:`one_line`) replaced by ``***``.

    Whitespace and escaped line breaks (``\\n``) are skipped while matching, and every run of
    :data:`SECRET_PIECE` characters that also occurs in a secret is covered; linear in the
    text's length.
    """
    secrets = [s for s in secrets if s]
    if not secrets or not text:
        return text
    compact, where = _matched_characters(text)
    covered = _covered(compact, secrets)
    out: list[str] = []
    last = 0
    j = 0
    while j < len(compact):
        if not covered[j]:
            j += 1
            continue
        end = j
        while end < len(compact) and covered[end]:
            end += 1
        out += [text[last : where[j]], "***"]
        last = where[end - 1] + 1
        j = end
    out.append(text[last:])
    return "".join(out)


def _matched_characters(text: str) -> tuple[str, list[int]]:
    """``text`` without whitespace and escaped line breaks, and where each character kept is
    in ``text``."""
    kept: list[str] = []
    where: list[int] = []
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text[i] == "\\" and text[i + 1 : i + 2] in ("n", "r", "t"):
            i += 2
        else:
            kept.append(text[i])
            where.append(i)
            i += 1
    return "".join(kept), where


def _covered(compact: str, secrets: list[str]) -> list[bool]:
    """Per character of ``compact``: part of a run of a secret's characters."""
    covered = [False] * len(compact)
    for secret in secrets:
        size = min(len(secret), SECRET_PIECE)
        pieces = {secret[j : j + size] for j in range(len(secret) - size + 1)}
        for j in range(len(compact) - size + 1):
            if compact[j : j + size] in pieces:
                covered[j : j + size] = [True] * size
    return covered


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, else ``retry-after`` given in
    seconds or as an HTTP date. None when absent or unreadable."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(float(raw_ms) / 1000, 0.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    current = time.time() if now is None else now
    return max(when.timestamp() - current, 0.0)


def error_details(body: str) -> tuple[str, str]:
    """``(message, code)`` from an error body in OpenAI, Anthropic or plain form."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return body, ""
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            message = err.get("message") or err.get("detail") or json.dumps(err)
            code = err.get("code") or err.get("type") or ""
            return str(message), str(code)
        if isinstance(err, str):
            return err, ""
    return body, ""


def status_error(
    provider: str,
    status: int,
    headers: Mapping[str, str],
    body: str,
    *,
    secrets: Iterable[str] = (),
    hints: Mapping[int, str] | None = None,
) -> CallError:
    """The error for an HTTP error answer, classified as retryable or not."""
    message, code = error_details(body)
    message = one_line(message or httpx.codes.get_reason_phrase(status), secrets)
    hint = (hints or {}).get(status)
    if hint:
        message = f"{message} ({hint})"
    should = headers.get("x-should-retry", "").strip().lower()
    if status in _NEVER_RETRY or code in _QUOTA_CODES:
        retryable = False
    elif should in ("true", "false"):
        retryable = should == "true"
    else:
        retryable = status in (408, 409, 429) or status >= 500
    return CallError(
        provider,
        message,
        status=status,
        retryable=retryable,
        retry_after=parse_retry_after(headers),
    )


async def with_retries(
    attempt: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    on_retry: Callable[[int, float, ModelError], None] | None = None,
) -> T:
    """Run ``attempt(n)`` for n = 0, 1, ... until it succeeds, fails for good, or retries run
    out; the final error says how many attempts were made."""
    number = 0
    while True:
        try:
            return await attempt(number)
        except ModelError as err:
            if not err.retryable or number >= policy.max_retries:
                if number == 0:
                    raise
                raise ModelError(
                    err.provider,
                    f"{err.message} (gave up after {number + 1} attempts)",
                    status=err.status,
                    retryable=err.retryable,
                ) from err
            delay = getattr(err, "retry_after", None)
            if delay is None or delay > policy.max_retry_after:
                delay = policy.backoff(number)
            if on_retry is not None:
                on_retry(number + 1, delay, err)
            await policy.sleep(delay)
            number += 1


async def stream_sse(
    client: httpx.AsyncClient,
    request: httpx.Request,
    policy: RetryPolicy,
    provider: str,
    *,
    secrets: Iterable[str] = (),
    hints: Mapping[int, str] | None = None,
) -> AsyncGenerator[SSEEvent, None]:
    """Send ``request`` and yield its server-sent events, guarding against stalls.

    A JSON (non-stream) answer is yielded whole as one event named :data:`WHOLE_BODY`.

    Raises:
        CallError: HTTP error status, connection failure, or a stream silent for too long.
    """
    secrets = tuple(secrets)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + policy.first_chunk_timeout
    # Host and port only: user info and the query may carry credentials.
    port = f":{request.url.port}" if request.url.port else ""
    where = f"{request.url.scheme}://{request.url.host}{port}"
    try:
        async with asyncio.timeout_at(deadline):
            response = await client.send(request, stream=True)
    except TimeoutError:
        raise CallError(provider, _stall_message(policy, False), retryable=True) from None
    except httpx.TransportError as exc:
        text = one_line(f"cannot reach {where}: {exc or type(exc).__name__}", secrets)
        raise CallError(provider, text, retryable=True) from None
    try:
        if response.status_code >= 400:
            body = await _read_body(response, deadline, provider)
            raise status_error(
                provider,
                response.status_code,
                response.headers,
                body,
                secrets=secrets,
                hints=hints,
            )
        if "text/event-stream" not in response.headers.get("content-type", ""):
            body = await _read_body(response, deadline, provider)
            yield SSEEvent(data=body, event=WHOLE_BODY)
            return
        decoder = SSEDecoder()
        chunks = response.aiter_bytes()
        received = False
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise CallError(
                    provider, _stall_message(policy, received), retryable=True
                ) from None
            except httpx.TransportError as exc:
                text = one_line(f"connection lost mid-stream: {exc or type(exc).__name__}", secrets)
                raise CallError(provider, text, retryable=True) from None
            received = True
            deadline = loop.time() + policy.chunk_timeout
            for event in decoder.feed(chunk):
                yield event
        decoder.close()
    finally:
        await response.aclose()


def _stall_message(policy: RetryPolicy, received: bool) -> str:
    if received:
        return f"stream stalled: no data for {policy.chunk_timeout:g}s"
    return f"stream stalled: no first chunk within {policy.first_chunk_timeout:g}s"


async def _read_body(response: httpx.Response, deadline: float, provider: str) -> str:
    try:
        async with asyncio.timeout_at(deadline):
            return (await response.aread()).decode("utf-8", errors="replace")
    except TimeoutError:
        raise CallError(provider, "timed out reading the answer", retryable=True) from None
    except httpx.TransportError:
        raise CallError(provider, "connection lost reading the answer", retryable=True) from None


class DeltaRelay:
    """Forwards text deltas once, across retried attempts of one call (and, through
    :meth:`reasoning`, reasoning deltas the same way).

    A retried attempt usually streams the same text again: its deltas are held back until they
    go past what was already forwarded. If a retry's text differs from what was forwarded, the
    rest of that attempt's deltas are held back; the final response text is authoritative.
    """

    def __init__(
        self, on_delta: DeltaCallback | None, on_reasoning: DeltaCallback | None = None
    ) -> None:
        self._on_delta = on_delta
        self._sent = ""
        self._pos = 0  # how much of the current attempt's text matches what was sent
        self._diverged = False
        # The same for what may be shown of the model's reasoning.
        self._reasoning = DeltaRelay(on_reasoning) if on_reasoning is not None else None

    def restart(self) -> None:
        """A new attempt begins."""
        self._pos = 0
        self._diverged = False
        if self._reasoning is not None:
            self._reasoning.restart()

    async def reasoning(self, text: str) -> None:
        """Forward a reasoning delta (once across attempts, as text deltas)."""
        if self._reasoning is not None and text:
            await self._reasoning(text)

    async def __call__(self, text: str) -> None:
        if not text or self._diverged:
            return
        overlap = min(len(text), len(self._sent) - self._pos)
        if overlap > 0:
            if self._sent[self._pos : self._pos + overlap] != text[:overlap]:
                self._diverged = True
                return
            self._pos += overlap
            text = text[overlap:]
        if text:
            self._sent += text
            self._pos += len(text)
            if self._on_delta is not None:
                await self._on_delta(text)
