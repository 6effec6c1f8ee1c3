"""The context pack at its limits: its accounting of what it left out or could not read,
keyword order, and the budget over odd content."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import open_turns_store, run_cli
from memdir.doc import tokencount as tokens
from memdir.doc.ids import new_id
from memdir.errors import InvalidInput
from memdir.service import Memory


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    m = open_turns_store(tmp_path)
    yield m
    m.close()


# -- what the pack left out --------------------------------------------------------------


def _big_log(tag: str) -> list[dict[str, Any]]:
    return [
        {"tool": f"step{i}", "args": {"path": f"src/{tag}/module_{i}.py"}, "result": "ok"}
        for i in range(60)
    ]


def test_a_turn_left_out_under_two_reasons_is_listed_once(tmp_path: Path) -> None:
    mem = open_turns_store(tmp_path, context_ancestors=0)
    try:
        # No work log: no shorter form to fall back on, so it is left out under both reasons.
        long = "zebra migration " + " ".join(f"step{n}" for n in range(400))
        big = mem.record_turn(thread="t", input=long, output="done")
        mem.record_turn(thread="t", input="next", output="ok", parents=[big.id])
        full = mem.context(thread="t", keywords=["zebra"], budget=10_000)
        assert big.id in [item.ref for item in full.items]
        pack = mem.context(thread="t", keywords=["zebra"], budget=full.tokens - 1)
        refs = [o["ref"] for o in pack.omitted]
        assert refs.count(big.id) == 1 and len(refs) == len(set(refs))
        entry = next(o for o in pack.omitted if o["ref"] == big.id)
        assert entry["reason"] == "latest turn of thread t"
        assert entry["also"] == ["matches keywords zebra"]
    finally:
        mem.close()


def test_a_turn_that_fits_in_a_shorter_form_is_not_listed_as_omitted(tmp_path: Path) -> None:
    mem = open_turns_store(tmp_path, context_ancestors_compact=0)
    try:
        big = mem.record_turn(thread="t", input="plan", output="planned", worklog=_big_log("b"))
        mem.record_turn(thread="t", input="next", output="ok", parents=[big.id])
        full = mem.context(thread="t", budget=10_000)
        pack = mem.context(thread="t", budget=full.tokens - 1)
        # Too big with its work, it is offered again without it, under its first reason
        # (it was left out there and only came in later, as an ancestor).
        item = next(i for i in pack.items if i.ref == big.id)
        assert item.reason == "latest turn of thread t"
        assert "**Work:**" not in item.text and "**Input:** plan" in item.text
        assert big.id not in [o["ref"] for o in pack.omitted]
        assert tokens.count(pack.text) <= pack.budget
    finally:
        mem.close()


def test_an_unreadable_turn_is_listed_in_skipped(mem: Memory) -> None:
    first = mem.record_turn(thread="t", input="first", output="one")
    broken = mem.record_turn(thread="t", input="second", output="two", parents=[first.id])
    path = mem.store.root / broken.path
    path.write_text(path.read_text().replace("## Compact", "## Kompakt"), encoding="utf-8")
    pack = mem.context(thread="t", budget=2000)
    assert broken.id not in [item.ref for item in pack.items]
    assert first.id in [item.ref for item in pack.items]
    assert [s["ref"] for s in pack.skipped] == [broken.id]
    assert "## Compact" in pack.skipped[0]["error"]
    assert pack.skipped[0]["path"] == broken.path
    assert pack.to_dict()["skipped"] == pack.skipped


def test_the_cli_names_an_unreadable_turn(mem: Memory) -> None:
    broken = mem.record_turn(thread="t", input="second", output="two")
    path = mem.store.root / broken.path
    path.write_text(path.read_text().replace("## Compact", "## Kompakt"), encoding="utf-8")
    out = run_cli("--root", str(mem.store.root), "context", "--thread", "t")
    assert out.returncode == 0
    assert f"could not be read: {broken.path}" in out.stderr.decode()


def test_a_budget_given_as_a_boolean_is_refused(mem: Memory) -> None:
    mem.record_turn(thread="t", input="q", output="a")
    with pytest.raises(InvalidInput) as err:
        mem.context(thread="t", budget=True)
    assert "positive number of tokens" in err.value.message


# -- keyword matches ---------------------------------------------------------------------


def test_keyword_matches_are_newest_first_when_recorded_out_of_order(tmp_path: Path) -> None:
    mem = open_turns_store(tmp_path, context_keyword_turns=3, context_ancestors=0)
    try:
        start = int(time.time() * 1000) - 3_600_000
        ids = [new_id(start + i * 1000) for i in range(6)]  # oldest first
        for ident in reversed(ids):  # an import: the newest is recorded first
            mem.record_turn(thread="k", input="zebra crossing", output="ok", id=ident)
        pack = mem.context(thread="elsewhere", keywords=["zebra"], budget=4000)
        got = [item.ref for item in pack.items if item.kind == "turn"]
        assert got == sorted(ids, reverse=True)[:3]
    finally:
        mem.close()


# -- the budget over odd content ---------------------------------------------------------


def test_the_budget_holds_over_odd_content_and_the_pack_is_repeatable(mem: Memory) -> None:
    odd = [
        "日本語のテキストと絵文字 👋🏽 e\u0301",
        "a1" * 3000,
        "".join(chr(c) for c in range(0x20, 0x7F)) * 20,
        "שלום עולם " * 100,
        json.dumps({"k": ["v"] * 400}),
    ]
    prev: list[str] = []
    for i, text in enumerate(odd * 3):
        rec = mem.record_turn(
            thread=f"t{i % 3}",
            user=f"u{i % 2}",
            input=text,
            output=text[::-1],
            worklog=[{"tool": "read", "args": {"path": text[:80]}, "result": text}],
            parents=prev[-2:],
            keywords=["odd"],
        )
        prev.append(rec.id)
    for budget in (40, 90, 200, 700, 1500, 5000):
        try:
            pack = mem.context(thread="t0", user="u0", keywords=["odd", "a1"], budget=budget)
        except InvalidInput as exc:
            assert "pack header" in exc.message  # only the smallest budgets
            continue
        assert tokens.count(pack.text) == pack.tokens <= budget
        refs = [item.ref for item in pack.items]
        assert len(refs) == len(set(refs))
        omitted = Counter(o["ref"] for o in pack.omitted)
        assert not omitted or max(omitted.values()) == 1
        assert not set(omitted) & set(refs)
        again = mem.context(thread="t0", user="u0", keywords=["odd", "a1"], budget=budget)
        assert again.text == pack.text and again.omitted == pack.omitted
