"""Work-log compaction: the deterministic default, the model plugin and its fallback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from http_server import ServiceHandler, fake_service
from memdir import __version__
from memdir.errors import ConfigError
from memdir.service import Memory
from memdir.settings import Settings
from memdir.turns.compaction import DefaultCompactor, compact_worklog

LOG: list[dict[str, Any]] = [
    {
        "tool": "grep",
        "args": {"pattern": "TODO", "path": "src/", "flags": "-n"},
        "result": "3 hits",
    },
    {"tool": "read", "args": {"path": "src/missing.py"}, "error": "No such file: src/missing.py"},
    {
        "type": "function",
        "function": {"name": "read", "arguments": json.dumps({"path": "src/app.py"})},
        "output": "def main(): ...",
    },
    {"tool": "pytest", "args": {"command": "pytest -q tests/"}, "result": "12 passed in 0.4s"},
]


def test_default_names_tools_args_errors_and_result() -> None:
    text = DefaultCompactor().compact(LOG, input="fix it", output="fixed", max_chars=1200)
    assert "Tools (4 calls): grep, read x2, pytest" in text
    assert "pattern=TODO" in text and "path=src/" in text
    assert "path=src/app.py" in text  # OpenAI-style arguments are decoded
    assert "Errors (1): read: No such file: src/missing.py" in text
    assert "Result: 12 passed in 0.4s" in text  # the last successful result


def test_default_is_deterministic_and_capped() -> None:
    long_log = [{"tool": f"tool{i % 7}", "args": {"path": f"f{i}.py" * 10}} for i in range(300)]
    a = DefaultCompactor().compact(long_log, input="", output="done", max_chars=400)
    b = DefaultCompactor().compact(long_log, input="", output="done", max_chars=400)
    assert a == b
    assert len(a) <= 400
    assert "more calls" in a
    assert a.startswith("- Tools (300 calls)")


def test_default_without_tools_uses_output() -> None:
    text = DefaultCompactor().compact([], input="hi", output="hello there", max_chars=200)
    assert "No tool calls." in text and "Result: hello there" in text


def test_unknown_compactor_is_an_error_not_a_fallback() -> None:
    s = Settings().replace(turns={"compactor": "nope"})
    with pytest.raises(ConfigError, match=r"unknown compactor 'nope'.*registered: default, llm"):
        compact_worklog(LOG, input="x", output="y", settings=s)


class _Handler(ServiceHandler):
    reply: dict[str, Any] | None = None
    seen: list[dict[str, Any]] = []
    busy = 0  # answers this many requests with 503 first

    def do_POST(self) -> None:
        body = self.read_json()
        if self.note_or_refuse(body, type(self).seen):
            return
        if self.reply is None:
            self.send_bytes(b"", 500)
            return
        self.send_json(self.reply)


@pytest.fixture
def endpoint() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"reply": None, "seen": [], "busy": 0})
    with fake_service(handler) as url:
        yield f"{url}/v1", handler


def _llm_settings(url: str) -> Settings:
    return Settings().replace(
        turns={"compactor": "llm", "compact_max_chars": 100},
        llm={
            "base_url": url,
            "model": "tiny",
            "api_key_env": "MEMDIR_TEST_KEY",
            "timeout_seconds": 5,
        },
    )


def test_llm_compactor_uses_the_endpoint(
    endpoint: tuple[str, type[_Handler]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = endpoint
    monkeypatch.setenv("MEMDIR_TEST_KEY", "sekret")
    handler.reply = {
        "choices": [{"message": {"content": "## Ran grep, found 3 TODOs.\n" + "x" * 200}}]
    }
    out = compact_worklog(LOG, input="find todos", output="3", settings=_llm_settings(url))
    assert out.compactor == "llm" and out.error is None
    assert out.text.startswith("\\## Ran grep")  # heading lines are escaped
    assert len(out.text) <= 100
    sent = handler.seen[0]
    assert sent["path"] == "/v1/chat/completions" and sent["auth"] == "Bearer sekret"
    assert (
        sent["body"]["model"] == "tiny" and "find todos" in sent["body"]["messages"][0]["content"]
    )


def test_llm_failure_falls_back_and_is_recorded(endpoint: tuple[str, type[_Handler]]) -> None:
    url, handler = endpoint
    handler.reply = None  # the endpoint answers 500
    out = compact_worklog(LOG, input="x", output="y", settings=_llm_settings(url))
    assert out.compactor == "default"
    assert out.error is not None and out.error.startswith("llm: llm compactor: POST ")
    assert "/v1/chat/completions answered HTTP 500" in out.error
    assert "Tools (4 calls)" in out.text


def test_llm_compactor_goes_through_the_shared_client(
    endpoint: tuple[str, type[_Handler]],
) -> None:
    url, handler = endpoint
    handler.reply = {"choices": [{"message": {"content": "Ran grep."}}]}
    handler.busy = 1  # one 503: asked again, and the second answer is the summary
    out = compact_worklog(LOG, input="x", output="y", settings=_llm_settings(url))
    assert out.compactor == "llm" and out.error is None and out.text == "Ran grep."
    assert len(handler.seen) == 2
    assert {s["agent"] for s in handler.seen} == {f"memdir/{__version__}"}


def test_llm_unconfigured_falls_back() -> None:
    out = compact_worklog(
        LOG, input="x", output="y", settings=Settings().replace(turns={"compactor": "llm"})
    )
    assert out.compactor == "default"
    assert out.error is not None and "base_url and model are not set" in out.error


@pytest.mark.parametrize("n", [1, 2, 5])
def test_the_default_compactor_counts_calls_in_the_right_number(n: int) -> None:
    log = [{"tool": "grep", "args": {"pattern": f"p{i}"}, "result": "hit"} for i in range(n)]
    text = DefaultCompactor().compact(log, input="find it", output="found", max_chars=800)
    first = text.splitlines()[0]
    noun = "call" if n == 1 else "calls"
    assert first.startswith(f"- Tools ({n} {noun}): grep")
    assert "1 calls" not in text


def test_a_recorded_turn_with_one_call_says_call(mem: Memory) -> None:
    rec = mem.record_turn(thread="t", input="x", worklog=[{"tool": "grep", "result": "1"}])
    compact = mem.turn_show(rec.id).compact
    assert "Tools (1 call): grep" in compact and "calls" not in compact.splitlines()[0]
