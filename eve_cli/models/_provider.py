"""What the HTTP providers share: settings from the environment, one client per event loop, and
the generate loop (retries, delta forwarding once per call, secrets kept out of messages).

Retries are logged at INFO on the ``eve_cli.models`` logger (quiet unless configured)."""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import ClassVar, Generic, TypeVar
from urllib.parse import parse_qsl, urlsplit

import httpx

from eve_cli._env import load_env
from eve_cli.models._base import DeltaCallback, Model, ModelError, ModelRequest, ModelResponse
from eve_cli.models._http import (
    CallError,
    DeltaRelay,
    RetryPolicy,
    one_line,
    redact,
    stream_sse,
    with_retries,
)
from eve_cli.models._settings import ModelSettings
from eve_cli.models._sse import SSEEvent
from eve_cli.models._windows import context_window_for

log = logging.getLogger("eve_cli.models")

Body = TypeVar("Body")  # the request body of a wire protocol (a TypedDict each)


class HTTPModel(Model, Generic[Body]):
    """A streaming model behind an HTTP API; subclasses speak one wire protocol."""

    #: Provider word used in model strings and error lines ("openai", "anthropic").
    provider: ClassVar[str]
    key_var: ClassVar[str]
    base_var: ClassVar[str]
    default_base_url: ClassVar[str]

    def __init__(
        self,
        model: str,
        *,
        context_window: int | None = None,
        env: Mapping[str, str] | None = None,
        retry: RetryPolicy | None = None,
        settings: ModelSettings | None = None,
    ) -> None:
        self.settings = settings or ModelSettings()
        env = load_env() if env is None else env
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.context_window = context_window_for(self.provider, model, context_window)
        base = (env.get(self.base_var) or self.default_base_url).strip()
        # A query (`?api-key=...`, Azure-style) is kept apart: paths are added before it.
        self.base_url, self._query = _split_query(base)
        # The key lives only here, in memory; every message we build is scrubbed of it, and
        # of any credential the base URL carries (user info, query values).
        self._api_key = (env.get(self.key_var) or "").strip() or None
        self._url_secrets = _url_secrets(base)
        self.retry = retry if retry is not None else RetryPolicy.from_env(env)
        self._configure(env)

    def _configure(self, settings: Mapping[str, str]) -> None:
        """Read provider-specific settings (subclasses override)."""

    def __repr__(self) -> str:
        key = "set" if self._api_key else "unset"
        base = redact(self.base_url, self._secrets)
        return f"{type(self).__name__}(model={self.model!r}, base_url={base!r}, key={key})"

    @property
    def _secrets(self) -> tuple[str, ...]:
        return ((self._api_key,) if self._api_key else ()) + self._url_secrets

    def _url(self, path: str) -> str:
        """The endpoint ``path`` under the base URL (its query, if any, kept at the end)."""
        return f"{self.base_url}{path}{'?' + self._query if self._query else ''}"

    @property
    def _is_public_endpoint(self) -> bool:
        return urlsplit(self.base_url).hostname == urlsplit(self.default_base_url).hostname

    async def generate(
        self,
        request: ModelRequest,
        on_delta: DeltaCallback | None = None,
        on_reasoning: DeltaCallback | None = None,
    ) -> ModelResponse:
        """Stream one call, retrying per :attr:`retry`; deltas reach ``on_delta`` and
        ``on_reasoning`` once."""
        if self._api_key is None and self._is_public_endpoint:
            raise ModelError(
                self.name,
                f"no API key: set {self.key_var} in the environment or in .env / .env.local "
                f"(or set {self.base_var} to a server that needs none)",
            )
        if urlsplit(self.base_url).scheme not in ("http", "https"):
            raise ModelError(
                self.name,
                f"{self.base_var} must start with http:// or https://, got "
                f"{redact(self.base_url, self._secrets)!r}",
            )
        relay = DeltaRelay(on_delta, on_reasoning)
        # One client per call: no connection outlives the event loop that opened it.
        timeout = httpx.Timeout(connect=self.retry.connect_timeout, read=None, write=60, pool=60)
        try:
            async with httpx.AsyncClient(timeout=timeout) as client:

                async def attempt(number: int) -> ModelResponse:
                    relay.restart()
                    # Built per attempt: a refusal may change what the next attempt sends.
                    url, body = self._endpoint(request)
                    return await self._attempt(client, url, body, request, relay)

                return await with_retries(attempt, self.retry, self._log_retry)
        except ModelError as err:
            if redact(err.message, self._secrets) != err.message:
                raise ModelError(
                    err.provider,
                    one_line(err.message, self._secrets),
                    status=err.status,
                    retryable=err.retryable,
                ) from None
            raise
        except (httpx.HTTPError, httpx.InvalidURL, ValueError) as exc:
            # httpx's own errors may quote the URL: what is recorded of them is scrubbed.
            text = one_line(f"{type(exc).__name__}: {exc}", self._secrets)
            raise ModelError(self.name, text) from None

    async def _attempt(
        self,
        client: httpx.AsyncClient,
        url: str,
        body: Body,
        request: ModelRequest,
        relay: DeltaRelay,
    ) -> ModelResponse:
        outgoing = client.build_request("POST", url, headers=self._headers(), json=body)
        events = stream_sse(
            client, outgoing, self.retry, self.name, secrets=self._secrets, hints=self._hints()
        )
        async with aclosing(events) as stream:
            return await self._read(stream, request, relay)

    def _log_retry(self, number: int, delay: float, err: ModelError) -> None:
        log.info("%s: retry %d in %.2fs after: %s", self.name, number, delay, err)

    def _hints(self) -> dict[int, str]:
        return {
            401: f"check {self.key_var}",
            403: f"check {self.key_var} and its permissions",
            404: f"check the model name {self.model!r} and {self.base_var}",
        }

    def _headers(self) -> dict[str, str]:
        return {"accept": "text/event-stream", "content-type": "application/json"}

    def _fail(
        self, message: str, *, retryable: bool = False, status: int | None = None
    ) -> CallError:
        return CallError(
            self.name, one_line(message, self._secrets), status=status, retryable=retryable
        )

    @abstractmethod
    def _endpoint(self, request: ModelRequest) -> tuple[str, Body]:
        """The URL and JSON body of ``request``."""

    @abstractmethod
    async def _read(
        self, events: AsyncIterator[SSEEvent], request: ModelRequest, relay: DeltaRelay
    ) -> ModelResponse:
        """Turn one attempt's events into a response; raise :class:`CallError` on failure."""


def _split_query(url: str) -> tuple[str, str]:
    """``(url without query and trailing slash, query)``."""
    head, _, query = url.partition("?")
    return head.rstrip("/"), query


def _url_secrets(url: str) -> tuple[str, ...]:
    """Credentials a base URL may carry: its user info, and its query's values of 8 or more
    characters (shorter ones, like ``api-version=1``, would redact common text)."""
    parts = urlsplit(url)
    found = [parts.password or "", (parts.username or "") if parts.password else ""]
    found += [value for _, value in parse_qsl(parts.query, keep_blank_values=True)]
    return tuple(v for v in found if len(v) >= 8)
