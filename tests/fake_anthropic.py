"""A scripted fake of the Anthropic Messages API on loopback, for the real-CLI test.

The ``claude`` CLI is pointed at it with ``ANTHROPIC_BASE_URL``. Every ``POST /v1/messages``
body is kept (``requests``), and the answer comes from ``respond(body)``, a function the test
gives: it returns the assistant's content blocks (text and ``tool_use``), so a script can look
at the conversation so far (the prompt, the tool results) and stay in step with it however
many sessions run at once. Answers are streamed as server-sent events when the request asks
for ``stream`` (Claude Code always does), as one JSON body otherwise.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], list[dict[str, Any]]]


def user_text(message: dict[str, Any]) -> str:
    """The text of one message: its string, or its text and tool_result blocks joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            if isinstance(inner, str):
                parts.append(inner)
            else:
                parts.extend(str(b.get("text", "")) for b in inner or [] if isinstance(b, dict))
    return "\n".join(parts)


def request_text(body: dict[str, Any]) -> str:
    """Everything the model is shown in one request: the system field and every message."""
    system = body.get("system")
    parts = [system if isinstance(system, str) else json.dumps(system or [])]
    parts.extend(user_text(m) for m in body.get("messages") or [] if isinstance(m, dict))
    return "\n".join(parts)


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of the newest user message."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return [
                    b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
                ]
            return []
    return []


class FakeAnthropic:
    """The server: ``url`` to point the CLI at, ``requests`` for what it was sent."""

    def __init__(self, respond: Responder) -> None:
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._ids = itertools.count(1)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = None
                path = self.path.split("?")[0]
                if path == "/v1/messages/count_tokens":
                    self._json(200, {"input_tokens": 100})
                    return
                if path != "/v1/messages" or not isinstance(body, dict):
                    self._json(404, {"type": "error", "error": {"type": "not_found_error"}})
                    return
                with fake.lock:
                    fake.requests.append(body)
                try:
                    blocks = fake.respond(body)
                except Exception as exc:  # a broken script shows in the test, not as a hang
                    blocks = [{"type": "text", "text": f"fake server script failed: {exc!r}"}]
                message = fake.message(body, blocks)
                if body.get("stream"):
                    self._stream(message)
                else:
                    self._json(200, message)

            def do_GET(self) -> None:
                self._json(404, {"type": "error", "error": {"type": "not_found_error"}})

            def _json(self, status: int, value: Any) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, message: dict[str, Any]) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for name, data in events(message):
                    chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def message(self, body: dict[str, Any], blocks: list[dict[str, Any]]) -> dict[str, Any]:
        """The assistant message for ``blocks`` (tool_use ids filled in)."""
        content = []
        for given in blocks:
            block = dict(given)
            if block.get("type") == "tool_use":
                block.setdefault("id", f"toolu_fake{next(self._ids):06d}")
                block.setdefault("input", {})
            content.append(block)
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        return {
            "id": f"msg_fake{next(self._ids):06d}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }


def events(message: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The message as the Messages API streams it."""
    start = {**message, "content": [], "stop_reason": None}
    yield "message_start", {"type": "message_start", "message": start}
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": first},
        )
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": 10},
        },
    )
    yield "message_stop", {"type": "message_stop"}


@contextmanager
def serving(respond: Responder) -> Iterator[FakeAnthropic]:
    """A fake server on a free loopback port for the duration of the block."""
    fake = FakeAnthropic(respond)
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()
        thread.join(timeout=5)
