"""A fake OpenAI Responses API on 127.0.0.1 that enforces the stateless rules.

With ``store: false`` the server keeps nothing: a function call's output needs its function
call in the input, and a function call that came with a reasoning item needs that reasoning
item sent back before it, with its id and its ``encrypted_content`` unchanged. Refusals are
HTTP 400 and recorded in ``violations``. Every answer reasons (one reasoning item), then says
its text and/or calls its tools; the N-th answer goes to a request holding N reasoning items.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Turn:
    summary: str
    text: str = ""
    tools: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class Refused(Exception):
    pass


class FakeResponses:
    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns
        self.requests: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self.issued: dict[str, str] = {}  # reasoning id -> encrypted content
        self.needs: dict[str, str] = {}  # function call id -> its reasoning item's id
        self.lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)

    def __enter__(self) -> FakeResponses:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def check(self, body: dict[str, Any]) -> None:
        if body.get("store") is not False:
            raise Refused("this test server only serves store: false")
        seen_reasoning: set[str] = set()
        calls: set[str] = set()
        for n, item in enumerate(body.get("input") or []):
            kind = item.get("type")
            if kind == "reasoning":
                rid = item.get("id")
                if rid not in self.issued or item.get("encrypted_content") != self.issued[rid]:
                    raise Refused(f"input[{n}]: reasoning item {rid!r} unknown or altered")
                seen_reasoning.add(rid)
            elif kind == "function_call":
                needed = self.needs.get(str(item.get("id")))
                if needed is not None and needed not in seen_reasoning:
                    raise Refused(
                        f"Item '{item.get('id')}' of type 'function_call' was provided without "
                        f"its required 'reasoning' item: '{needed}'."
                    )
                calls.add(str(item.get("call_id")))
            elif kind == "function_call_output" and item.get("call_id") not in calls:
                raise Refused(f"No tool call found for function call output {item.get('call_id')}")

    def answer(self, body: dict[str, Any]) -> list[bytes]:
        n = sum(1 for i in body.get("input") or [] if i.get("type") == "reasoning")
        turn = self.turns[n] if n < len(self.turns) else Turn(f"answer {n}", text=f"answer {n}")
        rid = f"rs_{len(self.requests)}"
        self.issued[rid] = f"ENC[{rid}:{turn.summary}]"
        output: list[dict[str, Any]] = [
            {
                "type": "reasoning",
                "id": rid,
                "encrypted_content": self.issued[rid],
                "summary": [{"type": "summary_text", "text": turn.summary}],
            },
        ]
        events: list[dict[str, Any]] = [{"type": "response.created", "response": {}}]
        # The summary streams first (as with `"summary": "auto"`), in two pieces.
        half = len(turn.summary) // 2
        for piece in (turn.summary[:half], turn.summary[half:]):
            events.append({"type": "response.reasoning_summary_text.delta", "item_id": rid,
                           "output_index": 0, "summary_index": 0, "delta": piece})  # fmt: skip
        events.append({"type": "response.output_item.done", "output_index": 0, "item": output[0]})
        if turn.text:
            events.append(
                {"type": "response.output_text.delta", "output_index": 1, "delta": turn.text}
            )
            message = {
                "type": "message",
                "id": f"msg_{rid}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
            output.append(message)
        for k, (name, arguments) in enumerate(turn.tools):
            fid = f"fc_{rid}_{k}"
            self.needs[fid] = rid
            output.append(
                {
                    "type": "function_call",
                    "id": fid,
                    "call_id": f"call_{rid}_{k}",
                    "name": name,
                    "arguments": json.dumps(arguments),
                    "status": "completed",
                }
            )
        for index, item in enumerate(output[1:], start=1):
            events.append(
                {"type": "response.output_item.done", "output_index": index, "item": item}
            )
        usage = {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 60},
            "output_tokens": 30,
            "output_tokens_details": {"reasoning_tokens": 20},
        }
        events.append(
            {
                "type": "response.completed",
                "response": {"status": "completed", "output": output, "usage": usage},
            }
        )
        return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def _handler(server: FakeResponses) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
            with server.lock:
                try:
                    server.check(body)
                except Refused as exc:
                    server.requests.append(body)
                    server.violations.append(str(exc))
                    self._send(
                        400,
                        "application/json",
                        [
                            json.dumps(
                                {"error": {"message": str(exc), "type": "invalid_request_error"}}
                            ).encode()
                        ],
                    )
                    return
                parts = server.answer(body)
                server.requests.append(body)
            self._send(200, "text/event-stream", parts)

        def _send(self, status: int, ctype: str, parts: list[bytes]) -> None:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(sum(len(p) for p in parts)))
            self.end_headers()
            for part in parts:
                self.wfile.write(part)
            self.wfile.flush()

    return Handler
