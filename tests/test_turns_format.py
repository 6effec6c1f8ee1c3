"""The turn record format: rendering, parsing and validation (no store needed)."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from memdir.doc.ids import new_id
from memdir.doc.turnrecord import (
    TurnRecord,
    created_of,
    parse_turn,
    parse_worklog,
    render_turn,
    turn_path,
    validate_keywords,
    validate_name,
    validate_parent_ids,
    worklog_from,
    worklog_path,
)
from memdir.errors import InvalidInput

TRICKY = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.sampled_from(
            ["## Compact", "## Output", "# Title", "```", "````text", "text", "", "  ## x", "\r"]
        ),
        max_size=8,
    ).map("\n".join),
)


def _record(**kw: object) -> TurnRecord:
    ident = new_id()
    base: dict[str, object] = {
        "id": ident,
        "thread": "t1",
        "user": "ana",
        "channel": "cli",
        "parents": (new_id(),),
        "keywords": ("deploy", "ünïcode"),
        "created": created_of(ident),
        "input": "How do I deploy?",
        "compact": "- Tools (1 calls): grep",
        "output": "Run make deploy.",
        "extra": {"compactor": "default"},
    }
    base.update(kw)
    return TurnRecord(**base)  # type: ignore[arg-type]


def test_render_has_the_design_fields_and_sections() -> None:
    rec = _record()
    text = render_turn(rec)
    fm = yaml.safe_load(text.split("---\n")[1])
    assert fm["episode_id"] == rec.id and fm["memory_kind"] == "episodic" and fm["type"] == "turn"
    assert fm["thread"] == "t1" and fm["user"] == "ana" and fm["channel"] == "cli"
    assert fm["parents"] == list(rec.parents) and fm["keywords"] == ["deploy", "ünïcode"]
    assert fm["created"] == rec.created and fm["compactor"] == "default"
    body = text.split("---\n", 2)[2]
    assert body.index("## Input") < body.index("## Compact") < body.index("## Output")
    assert "How do I deploy?" in body and "Run make deploy." in body


@settings(max_examples=150, deadline=None)
@given(TRICKY, TRICKY)
def test_input_and_output_round_trip_exactly(inp: str, out: str) -> None:
    rec = _record(input=inp, output=out)
    back = parse_turn(render_turn(rec))
    assert back.input == inp
    assert back.output == out
    assert back.compact == rec.compact
    assert back.parents == rec.parents and back.keywords == rec.keywords


def test_heading_lines_are_fenced_not_rewritten() -> None:
    rec = _record(input="## Output\nnot really", output="```py\nx\n```")
    text = render_turn(rec)
    assert "```text\n## Output\nnot really\n```\n\n## Compact" in text
    assert "````text\n```py\nx\n```\n````\n" in text
    assert parse_turn(text).output == "```py\nx\n```"


def test_odd_frontmatter_values_stay_strings() -> None:
    rec = _record(thread="42", user="yes", keywords=("null", "1.5", 'a"b', "x\u0085y"))
    back = parse_turn(render_turn(rec))
    assert back.thread == "42" and back.user == "yes"
    assert back.keywords == ("null", "1.5", 'a"b', "x\u0085y")


def test_paths_follow_the_id_day() -> None:
    ms = 1_767_225_600_000 + 5  # 2026-01-01T00:00:00.005Z
    alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
    ident = "".join(alphabet[(ms >> (5 * i)) & 31] for i in reversed(range(10))) + "0" * 16
    assert turn_path(ident) == f"episodes/turns/2026/01/01/{ident}.md"
    assert worklog_path(ident) == f"episodes/turns/2026/01/01/{ident}.worklog.jsonl"
    assert created_of(ident) == "2026-01-01T00:00:00.005Z"
    with pytest.raises(InvalidInput):
        turn_path("../../etc/passwd")


@pytest.mark.parametrize(
    "bad", ["a/b", "a\\b", "tab\there", "nl\n", "\x00", "..", " lead", "x" * 201, "bell\x07"]
)
def test_bad_thread_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput):
        validate_name("thread", bad, required=True)


def test_names_keywords_parents() -> None:
    assert validate_name("user", "", required=False) == ""
    with pytest.raises(InvalidInput, match="thread is required"):
        validate_name("thread", "", required=True)
    assert validate_name("thread", "support#12 ünï", required=True) == "support#12 ünï"
    assert validate_keywords("a, b,,a\nc") == ("a", "b", "c")
    with pytest.raises(InvalidInput):
        validate_keywords(["ok", "bad\x1b"])
    me = new_id()
    p = new_id()
    assert validate_parent_ids([p, p]) == (p,)
    with pytest.raises(InvalidInput, match="own parent"):
        validate_parent_ids([p, me], me)


def test_worklog_jsonl_kept_byte_for_byte() -> None:
    raw = b'{"tool": "grep",  "args": {"q": "x"}}\n\n{"result":"\\u00e9"}'
    data, entries = worklog_from(raw)
    assert data == raw
    assert entries == [{"tool": "grep", "args": {"q": "x"}}, {"result": "é"}]
    listed, parsed = worklog_from([{"tool": "a", "n": 1}, {"result": "ü"}])
    assert listed == '{"tool": "a", "n": 1}\n{"result": "ü"}\n'.encode()
    assert parse_worklog(listed) == parsed


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"a": 1}\nnot json\n', "line 2 is not valid JSON"),
        (b"[1, 2]\n", "line 1 must be a JSON object"),
        (b'{"a": "\xff"}', "not valid UTF-8"),
    ],
)
def test_bad_worklogs_are_refused(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        worklog_from(raw)


def test_worklog_list_entries_must_be_objects() -> None:
    with pytest.raises(InvalidInput, match="entry 2 must be an object"):
        worklog_from([{"a": 1}, "b"])
    with pytest.raises(InvalidInput, match="not JSON"):
        worklog_from([{"a": float("nan")}])
    assert json.loads(worklog_from([{"a": [1]}])[0]) == {"a": [1]}
