"""A fake Messages API on 127.0.0.1 that enforces the rules the real one does, and caches.

It answers from a list of :class:`Answer` (the N-th answer to a request holding N assistant
turns, so a request repeated after a crash gets the same answer) and refuses with HTTP 400 what
the real API refuses (each refusal recorded in ``violations``):

* roles alternate, starting with ``user``; tool results open their user turn and answer the
  tool uses of the assistant turn just before, all of them;
* with thinking on: ``budget_tokens`` of at least 1024 and below ``max_tokens``; an assistant
  turn followed by tool results starts with a thinking or redacted-thinking block;
* every thinking block comes back unchanged: its signature is the one this server gave its
  text, a redacted block's data is data this server sent, no field added;
* at most 4 ``cache_control`` breakpoints, none on a thinking block.

Prompt caching is modelled as the API describes it: a breakpoint caches the prefix (tools,
system, messages) up to its block; a request reads the longest cached prefix ending at one of
its breakpoints and writes the prefix of its last one. Tokens are counted as 4 characters of
the prefix's JSON each.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECRET = b"fake-anthropic"


def sign(thinking: str) -> str:
    return hashlib.sha256(SECRET + thinking.encode()).hexdigest()


@dataclass
class Answer:
    """One scripted answer: thinking (signed by the server), redacted thinking, text, tool uses
    ``(name, input)``; ``pause``: seconds to wait after the first text delta."""

    text: str = ""
    thinking: str | None = None
    redacted: bool = False
    tools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    pause: float = 0.0
    searches: list[str] = field(default_factory=list)  # web searches the server runs first


class Refused(Exception):
    pass


class FakeAnthropic:
    def __init__(self, answers: list[Answer] | None = None) -> None:
        self.answers = list(answers or [])
        self.requests: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self.cache: set[str] = set()
        self.redacted: set[str] = set()
        self.server_blocks: set[str] = set()  # server tool blocks sent, as JSON
        self.lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # -- the rules
    def check(self, body: dict[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(body.get("max_tokens"), int):
            raise Refused("max_tokens: field required")
        if not isinstance(messages, list) or not messages:
            raise Refused("messages: at least one message is required")
        thinking = body.get("thinking") or {}
        if thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or budget < 1024 or budget >= body["max_tokens"]:
                raise Refused("thinking.budget_tokens: must be >= 1024 and less than max_tokens")
        self._check_messages(messages, thinking, _marks(body.get("system"), body.get("tools")))

    def _check_messages(self, messages: list[Any], thinking: Any, breakpoints: int) -> None:
        for n, message in enumerate(messages):
            if message.get("role") != ("user" if n % 2 == 0 else "assistant"):
                raise Refused(f"messages.{n}: roles must alternate, starting with user")
            content = message.get("content")
            blocks = content if isinstance(content, list) else []
            for block in blocks:
                breakpoints += "cache_control" in block
                self._check_block(n, block)
            if message["role"] == "user":
                self._check_results(n, blocks, messages[n - 1] if n else None, thinking)
        if breakpoints > 4:
            raise Refused(
                f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
            )

    def _check_block(self, n: int, block: dict[str, Any]) -> None:
        kind = block.get("type")
        if kind == "thinking":
            if set(block) != {"type", "thinking", "signature"}:
                raise Refused(f"messages.{n}: thinking block fields {sorted(block)} were changed")
            if block["signature"] != sign(block["thinking"]):
                raise Refused(f"messages.{n}: Invalid `signature` in `thinking` block")
        elif kind in ("server_tool_use", "web_search_tool_result") and (
            json.dumps(block, sort_keys=True) not in self.server_blocks
        ):
            raise Refused(f"messages.{n}: a {kind} block was changed or never sent")
        elif kind == "redacted_thinking" and (
            set(block) != {"type", "data"} or block["data"] not in self.redacted
        ):
            raise Refused(f"messages.{n}: redacted_thinking data was changed")

    def _check_results(
        self, n: int, blocks: list[dict[str, Any]], before: dict[str, Any] | None, thinking: Any
    ) -> None:
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if not results:
            return
        if blocks[: len(results)] != results:
            raise Refused(f"messages.{n}: tool_result blocks must come first")
        asked = [b for b in (before or {}).get("content") or [] if b.get("type") == "tool_use"]
        if sorted(b["tool_use_id"] for b in results) != sorted(b["id"] for b in asked):
            raise Refused(f"messages.{n}: each tool_use needs its tool_result, just after it")
        first = ((before or {}).get("content") or [{}])[0].get("type")
        if thinking.get("type") == "enabled" and first not in ("thinking", "redacted_thinking"):
            raise Refused(
                f"messages.{n - 1}: Expected `thinking` or `redacted_thinking`, but found "
                f"`{first}`. When `thinking` is enabled, an assistant message with tool use "
                "must start with its thinking block"
            )

    # -- caching
    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        prefix: list[Any] = [{"tools": body.get("tools")}]
        system = body.get("system")
        prefixes: list[str] = []
        for part in system if isinstance(system, list) else [system]:
            prefix.append(part)
            if isinstance(part, dict) and "cache_control" in part:
                prefixes.append(_strip(prefix))
        if any("cache_control" in t for t in body.get("tools") or []):
            prefixes.insert(0, _strip([{"tools": body.get("tools")}]))
        for message in body["messages"]:
            content = message["content"]
            for block in content if isinstance(content, list) else [content]:
                prefix.append({"role": message["role"], "block": block})
                if isinstance(block, dict) and "cache_control" in block:
                    prefixes.append(_strip(prefix))
        total = _tokens(_strip(prefix))
        read = max((_tokens(p) for p in prefixes if p in self.cache), default=0)
        write = 0
        if prefixes and prefixes[-1] not in self.cache:
            write = _tokens(prefixes[-1]) - read
        self.cache.update(prefixes)
        return {
            "input_tokens": total - read - write,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": write,
        }

    def answer_for(self, body: dict[str, Any]) -> Answer:
        n = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        if n >= len(self.answers):
            return Answer(text=f"answer {n}")
        return self.answers[n]


def _marks(*places: Any) -> int:
    """The cache breakpoints of the system prompt and tools."""
    return sum(
        1
        for where in places
        if isinstance(where, list)
        for block in where
        if isinstance(block, dict) and "cache_control" in block
    )


def _strip(prefix: list[Any]) -> str:
    """The prefix as the cache sees it: cache_control marks are not part of the content."""
    text = json.dumps(prefix, sort_keys=True)
    return text.replace(', "cache_control": {"type": "ephemeral"}', "").replace(
        '"cache_control": {"type": "ephemeral"}, ', ""
    )


def _tokens(text: str) -> int:
    return len(text) // 4


def _events(answer: Answer, usage: dict[str, int], server: FakeAnthropic) -> list[Any]:
    def ev(kind: str, **data: Any) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

    out: list[Any] = [
        ev("message_start", message={"id": "msg", "usage": {**usage, "output_tokens": 1}})
    ]
    index = 0
    if answer.thinking is not None:
        out.append(
            ev(
                "content_block_start",
                index=index,
                content_block={"type": "thinking", "thinking": "", "signature": ""},
            )
        )
        half = len(answer.thinking) // 2
        for part in (answer.thinking[:half], answer.thinking[half:]):
            out.append(
                ev(
                    "content_block_delta",
                    index=index,
                    delta={"type": "thinking_delta", "thinking": part},
                )
            )
        out.append(
            ev(
                "content_block_delta",
                index=index,
                delta={"type": "signature_delta", "signature": sign(answer.thinking)},
            )
        )
        out.append(ev("content_block_stop", index=index))
        index += 1
    if answer.redacted:
        data = f"opaque-{len(server.redacted)}-" + "x" * 40
        server.redacted.add(data)
        out.append(
            ev(
                "content_block_start",
                index=index,
                content_block={"type": "redacted_thinking", "data": data},
            )
        )
        out.append(ev("content_block_stop", index=index))
        index += 1
    for query in answer.searches:
        use = {
            "type": "server_tool_use",
            "id": f"srvtoolu_{len(server.server_blocks) // 2}",
            "name": "web_search",
            "input": {},
        }
        result = {
            "type": "web_search_tool_result",
            "tool_use_id": use["id"],
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://example.org/",
                    "title": query,
                    "encrypted_content": "EwSr" + query,
                }
            ],
        }
        server.server_blocks.add(json.dumps({**use, "input": {"query": query}}, sort_keys=True))
        server.server_blocks.add(json.dumps(result, sort_keys=True))
        out.append(ev("content_block_start", index=index, content_block=use))
        partial = json.dumps({"query": query})
        out.append(
            ev(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": partial},
            )
        )
        out.append(ev("content_block_stop", index=index))
        out.append(ev("content_block_start", index=index + 1, content_block=result))
        out.append(ev("content_block_stop", index=index + 1))
        index += 2
    if answer.text:
        out.append(
            ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
        )
        words = answer.text.split(" ")
        for i, word in enumerate(words):
            part = word if i == 0 else " " + word
            out.append(
                ev("content_block_delta", index=index, delta={"type": "text_delta", "text": part})
            )
            if i == 0 and answer.pause:
                out.append(answer.pause)
        out.append(ev("content_block_stop", index=index))
        index += 1
    for n, (name, arguments) in enumerate(answer.tools):
        block = {
            "type": "tool_use",
            "id": f"toolu_{len(server.requests)}_{n}",
            "name": name,
            "input": {},
        }
        out.append(ev("content_block_start", index=index, content_block=block))
        out.append(
            ev(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": json.dumps(arguments)},
            )
        )
        out.append(ev("content_block_stop", index=index))
        index += 1
    stop = "tool_use" if answer.tools else "end_turn"
    out.append(ev("message_delta", delta={"stop_reason": stop}, usage={"output_tokens": 10}))
    out.append(ev("message_stop"))
    return out


def _handler(server: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
            with server.lock:
                server.requests.append(body)
                try:
                    server.check(body)
                except Refused as exc:
                    server.violations.append(str(exc))
                    error = {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": str(exc)},
                    }
                    self._send(400, "application/json", [json.dumps(error).encode()])
                    return
                events = _events(server.answer_for(body), server.usage(body), server)
            try:
                self._send(200, "text/event-stream", events)
            except OSError:
                self.close_connection = True

        def _send(self, status: int, ctype: str, parts: list[Any]) -> None:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for part in parts:
                if isinstance(part, float):
                    self.wfile.flush()
                    time.sleep(part)
                    continue
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler
