"""Helpers of the browser view's tests: Debian's Chromium driven by Playwright (no browser
download: the machines cannot fetch one), pages on a real `eve start` on 127.0.0.1.

Outside CI a missing Chromium or Playwright skips these tests, saying so; under CI (`CI=true`)
it fails them (`.ci/run` installs Chromium with apt, the `test` extra installs Playwright).
"""

from __future__ import annotations

import os
import queue
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.eve_cli.channel.channel_support import WAIT

CHROMIUM = os.environ.get("EVE_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}; under CI the browser tests must run (.ci/run installs it)")
    pytest.skip(f"{what}; not under CI, so the browser tests are skipped")


class BrowserThread:
    """Runs the Playwright sync API in a thread of its own.

    Playwright's sync API runs its event loop inside the calling thread (in a greenlet), where
    that loop then counts as running: any `asyncio.run` later in that thread fails, in these
    tests and in every test after them. Kept in this thread, the browser lives for the whole
    test session while the tests' thread stays free; :class:`Remote` forwards each call here.
    """

    def __init__(self) -> None:
        self._calls: queue.Queue[tuple[Callable[[], Any], list[Any], threading.Event] | None]
        self._calls = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="eve-test-browser", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            fn, box, done = item
            try:
                box.append((True, fn()))
            except BaseException as exc:
                box.append((False, exc))
            done.set()

    def run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` in the browser thread; its result, or its exception raised here."""
        if threading.current_thread() is self._thread:
            return fn()  # an event handler calling back
        box: list[Any] = []
        done = threading.Event()
        self._calls.put((fn, box, done))
        if not done.wait(WAIT * 3):
            raise TimeoutError("the browser thread did not answer")
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        self._calls.put(None)
        self._thread.join(WAIT)


class Remote:
    """A Playwright object (or function) of the browser thread: attribute reads and calls run
    there, Playwright objects come back as Remotes, plain values as they are."""

    def __init__(self, worker: BrowserThread, target: Any) -> None:
        self._worker = worker
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return self._wrap(self._worker.run(lambda: getattr(self._target, name)))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        args = tuple(_unwrap(a) for a in args)
        kwargs = {k: _unwrap(v) for k, v in kwargs.items()}
        return self._wrap(self._worker.run(lambda: self._target(*args, **kwargs)))

    def _wrap(self, value: Any) -> Any:
        if callable(value) or type(value).__module__.startswith("playwright."):
            return Remote(self._worker, value)
        return value


def _unwrap(value: Any) -> Any:
    return value._target if isinstance(value, Remote) else value


@contextmanager
def open_browser() -> Iterator[Remote]:
    """One headless Chromium (the session-scoped fixture's), as a :class:`Remote`."""
    try:
        import playwright.sync_api as api
    except ImportError:
        _missing("the playwright package is not installed (pip install -e '.[test]')")
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        _missing(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    worker = BrowserThread()
    try:
        manager = api.sync_playwright()
        playwright = worker.run(manager.__enter__)
        try:
            api.expect.set_options(timeout=WAIT * 1000)
            browser = worker.run(
                lambda: playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            )
            try:
                yield Remote(worker, browser)
            finally:
                worker.run(browser.close)
        finally:
            worker.run(lambda: manager.__exit__(None, None, None))
    finally:
        worker.stop()


def expect(target: Remote) -> Any:
    """Playwright's ``expect`` for a Remote locator or page (its assertions run remotely)."""
    from playwright.sync_api import expect as playwright_expect

    return Remote(target._worker, playwright_expect)(target)


class Tab:
    """A page in a fresh browser context (its own storage), with what it asked the network
    for and the errors its script raised."""

    def __init__(self, browser: Remote, **context: Any) -> None:
        self.context = browser.new_context(**{"viewport": DESKTOP, **context})
        self.page: Any = self.context.new_page()
        self.page.set_default_timeout(WAIT * 1000)
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def close(self) -> None:
        self.context.close()
