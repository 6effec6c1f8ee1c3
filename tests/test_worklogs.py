"""Work logs as a turn records them: JSON strings that hold what a record cannot (NUL, lone
surrogates, control characters), steps without a tool, long names, malformed lines."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import open_turns_store
from memdir.doc.turnrecord import says_nothing_new
from memdir.errors import InvalidInput
from memdir.service import Memory


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    m = open_turns_store(tmp_path)
    yield m
    m.close()


@pytest.mark.parametrize(
    "worklog",
    [
        '{"tool": "cat", "args": {"path": "/bin/ls"}, "result": "ELF\\u0000\\u0001\\u0002"}\n',
        [{"tool": "cat", "result": "ELF\x00\x01\x02"}],
        '{"tool": "cat", "result": "half a pair \\ud800 here"}\n',
        '{"tool": "ca\\u0000t", "error": "bad \\udc80 byte"}\n',
    ],
)
def test_a_valid_work_log_with_nul_or_a_lone_surrogate_is_recorded(
    mem: Memory, worklog: str | list[dict[str, str]]
) -> None:
    rec = mem.record_turn(thread="t", input="show the binary", output="done", worklog=worklog)
    raw = (mem.store.root / rec.path).read_bytes()
    assert b"\x00" not in raw
    raw.decode("utf-8")  # real Unicode: no lone surrogate reached the file
    assert "\\x00" in rec.compact or "\\ud800" in rec.compact or "\\udc80" in rec.compact
    assert mem.turn_show(rec.id).compact == rec.compact
    expected = worklog.encode() if isinstance(worklog, str) else None
    if expected is not None:
        assert mem.turn_worklog(rec.id) == expected  # the sidecar is kept byte for byte
    pack = mem.context(thread="t", budget=2000)
    assert rec.id in [item.ref for item in pack.items]


def test_other_control_characters_in_a_result_are_shown_escaped(mem: Memory) -> None:
    log = [{"tool": "shell", "result": "\x1b[31mred\x1b[0m \x07bell"}]
    rec = mem.record_turn(thread="t", input="colour?", output="red", worklog=log)
    assert "\x1b" not in rec.compact and "\x07" not in rec.compact
    assert "\\x1b[31mred" in rec.compact and "\\x07bell" in rec.compact


def test_steps_that_name_no_tool_are_kept_in_the_pack_and_the_index(mem: Memory) -> None:
    log = [{"role": "tool", "tool_call_id": "call_1", "content": "sunny and 21C in Zurich"}]
    rec = mem.record_turn(thread="t", input="weather?", output="see above", worklog=log)
    assert not says_nothing_new(rec.compact)
    assert "sunny and 21C" in rec.compact and "1 step" in rec.compact
    pack = mem.context(thread="t", budget=2000)
    assert "**Work:**" in pack.text and "sunny and 21C" in pack.text
    hits = mem.search("sunny", type="turn", limit=5)
    assert [h.path for h in hits] == [rec.path]


def test_a_turn_without_work_log_keeps_the_no_tool_note(mem: Memory) -> None:
    rec = mem.record_turn(thread="t", input="hi", output="hello")
    assert says_nothing_new(rec.compact)


def test_a_very_long_tool_name_leaves_room_for_the_result(mem: Memory) -> None:
    log = [{"tool": "x" * 10_000, "result": "the answer is 42"}]
    rec = mem.record_turn(thread="t", input="q", output="a", worklog=log)
    first = rec.compact.split("\n")[0]
    assert len(first) < 120
    assert "Result: the answer is 42" in rec.compact


def test_a_malformed_work_log_names_its_line_and_writes_nothing(mem: Memory) -> None:
    before = sorted(p.name for p in mem.store.root.rglob("*") if ".memdir" not in p.parts)
    for bad, line in [('{"tool": "a"}\n{oops\n', 2), ('{"tool": "a"}\n\n[1, 2]\n', 3)]:
        with pytest.raises(InvalidInput) as err:
            mem.record_turn(thread="t", input="q", output="a", worklog=bad)
        assert f"work log line {line}" in err.value.message
    after = sorted(p.name for p in mem.store.root.rglob("*") if ".memdir" not in p.parts)
    assert after == before
