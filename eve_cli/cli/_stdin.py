"""`eve chat` without a terminal: each non-empty line of stdin is a message.

Bytes that are not UTF-8 do not stop the conversation: they are replaced (U+FFFD) and said
once on stderr; so are those of a message given as an argument (:func:`argument_text`).
Lines still unread when the chat has to stop (a turn waits for an answer
nobody present can give) are counted, so that none is dropped without a word.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import BinaryIO, TextIO

from eve_cli._text import bad_text, repair_str


class PipedLines:
    """The messages of a piped stdin (``stream``: its bytes)."""

    def __init__(self, stream: BinaryIO | None = None, err: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else _binary_stdin()
        self._err = err or sys.stderr
        self._warned = False

    def __iter__(self) -> Iterator[str]:
        for number, raw in enumerate(self._stream, 1):
            line = self._decode(raw, number).rstrip("\r\n")
            if line.strip():
                yield line

    def _decode(self, raw: bytes, number: int) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if not self._warned:
                self._warned = True
                self._err.write(
                    f"eve: warning: stdin line {number} is not UTF-8 (byte {exc.start + 1}); "
                    "bytes that are not were replaced by U+FFFD and the chat goes on\n"
                )
                self._err.flush()
            return raw.decode("utf-8", "replace")

    def unread(self) -> list[str]:
        """The non-empty lines left unread that can be read now without waiting (a pipe whose
        writer is still writing is not waited for)."""
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
            os.set_blocking(self._stream.fileno(), False)
        try:
            data = self._stream.read() or b""
        except (BlockingIOError, OSError, ValueError):
            data = b""
        text = data.decode("utf-8", "replace")
        return [line for line in text.splitlines() if line.strip()]


def argument_text(value: str | None, err: TextIO | None = None) -> str | None:
    """A message given as an argument, its bytes that are not UTF-8 (which Python passes as
    lone surrogates) replaced by U+FFFD, with one warning on stderr."""
    if value is None or bad_text(value) is None:
        return value
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no byte became (not from the command line)
        fixed = repair_str(value)
    else:
        fixed = raw.decode("utf-8", "replace")
    (err or sys.stderr).write(
        "eve: warning: the message is not UTF-8; bytes that are not were replaced by U+FFFD\n"
    )
    return fixed


def _binary_stdin() -> BinaryIO:
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is not None:
        return buffer  # type: ignore[no-any-return]
    # A text stdin without bytes underneath (a test runner's): encode its text back.
    return io.BytesIO(sys.stdin.read().encode("utf-8", "surrogateescape"))
