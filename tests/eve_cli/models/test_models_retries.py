"""Retry decisions seen from the wire: which statuses are retried, and how long we wait."""

from __future__ import annotations

import email.utils
import time

import pytest

from eve_cli.models import ModelRequest
from eve_cli.models._http import RetryPolicy
from eve_cli.models.openai import OpenAIModel
from tests.eve_cli.models.scriptserver import Reply, ScriptServer, Sleeps, failure, generate, sse

REQUEST = ModelRequest(system="", messages=[{"role": "user", "content": "hi"}])
OK = Reply(
    chunks=[
        sse({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}),
        b"data: [DONE]\n\n",
    ]
)
RATE_LIMITED = b'{"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}'


def model_for(server: ScriptServer, policy: RetryPolicy) -> OpenAIModel:
    return OpenAIModel("m", env={"OPENAI_BASE_URL": server.url + "/v1"}, retry=policy)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "2"}, 2.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the finer header wins
    ],
)
def test_429_waits_as_the_server_asks(
    server: ScriptServer,
    policy: RetryPolicy,
    sleeps: Sleeps,
    headers: dict[str, str],
    expected: float,
) -> None:
    server.add(Reply(429, headers=headers, body=RATE_LIMITED), OK)
    response, _ = generate(model_for(server, policy), REQUEST)

    assert response.text == "ok"
    assert sleeps.delays == [expected]
    assert len(server.requests) == 2


def test_429_retry_after_as_an_http_date(
    server: ScriptServer, policy: RetryPolicy, sleeps: Sleeps
) -> None:
    when = email.utils.formatdate(time.time() + 3, usegmt=True)
    server.add(Reply(429, headers={"retry-after": when}, body=RATE_LIMITED), OK)
    generate(model_for(server, policy), REQUEST)

    (delay,) = sleeps.delays
    assert 1.0 < delay <= 3.0  # the date has whole seconds
    assert len(server.requests) == 2


def test_retry_after_ms_is_really_waited(server: ScriptServer) -> None:
    policy = RetryPolicy(base_delay=5.0)  # real sleeps: only the header's 120 ms may be used
    server.add(Reply(503, headers={"retry-after-ms": "120"}, body=b"busy"), OK)
    response, _ = generate(model_for(server, policy), REQUEST)

    first, second = server.requests
    assert response.text == "ok"
    assert 0.12 <= second.at - first.at < 2.0


def test_an_absurd_retry_after_falls_back_to_backoff(
    server: ScriptServer, policy: RetryPolicy, sleeps: Sleeps
) -> None:
    server.add(Reply(429, headers={"retry-after": "86400"}, body=RATE_LIMITED), OK)
    generate(model_for(server, policy), REQUEST)

    (delay,) = sleeps.delays
    assert 0 < delay <= policy.base_delay


def test_x_should_retry_false_stops_a_retryable_status(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    server.add(Reply(503, headers={"x-should-retry": "false"}, body=b"down for maintenance"))
    err = failure(model_for(server, policy), REQUEST)

    assert str(err) == "openai:m (HTTP 503): down for maintenance"
    assert len(server.requests) == 1


def test_x_should_retry_true_retries_a_status_we_would_not(
    server: ScriptServer, policy: RetryPolicy
) -> None:
    server.add(Reply(418, headers={"x-should-retry": "true"}, body=b"teapot"), OK)
    response, _ = generate(model_for(server, policy), REQUEST)

    assert response.text == "ok" and len(server.requests) == 2


def test_quota_exhausted_429_is_not_retried(server: ScriptServer, policy: RetryPolicy) -> None:
    body = (
        b'{"error": {"message": "You exceeded your current quota",'
        b' "type": "insufficient_quota", "code": "insufficient_quota"}}'
    )
    server.add(Reply(429, headers={"retry-after": "1"}, body=body))
    err = failure(model_for(server, policy), REQUEST)

    assert str(err) == "openai:m (HTTP 429): You exceeded your current quota"
    assert (err.retryable, len(server.requests)) == (False, 1)


@pytest.mark.parametrize("status", [408, 409, 500, 502, 529])
def test_transient_statuses_are_retried_with_growing_backoff(
    server: ScriptServer, policy: RetryPolicy, sleeps: Sleeps, status: int
) -> None:
    server.add(*[Reply(status, body=b"") for _ in range(3)], OK)
    response, _ = generate(model_for(server, policy), REQUEST)

    assert response.text == "ok" and len(server.requests) == 4
    # Exponential with at most 25% jitter taken off: 0.01, 0.02, 0.04.
    for attempt, delay in enumerate(sleeps.delays):
        nominal = policy.base_delay * 2**attempt
        assert 0.75 * nominal <= delay <= nominal


def test_server_errors_until_retries_run_out(server: ScriptServer, policy: RetryPolicy) -> None:
    server.add(*[Reply(500, body=b'{"error": {"message": "boom"}}') for _ in range(5)])
    err = failure(model_for(server, policy), REQUEST)

    assert str(err) == "openai:m (HTTP 500): boom (gave up after 4 attempts)"
    assert len(server.requests) == 4
