"""query's answer kind: a question that asks how much, how many, how long or when is "not
found" on a page that holds no value of that kind, however close its subject."""

from __future__ import annotations

from pathlib import Path

import pytest

from memdir.engine import query
from memdir.service import Memory

LENS = "I ordered a Barlow lens from First Light Optics, order number FLO-58213."


@pytest.mark.parametrize(
    ("question", "texts", "holds"),
    [
        ("How much did the Barlow lens cost?", [LENS], False),  # a code is not an amount
        ("How much did the Barlow lens cost?", [LENS + " It was £89."], True),
        ("How many hens have we got now?", ["We are down to four birds now."], True),
        ("How long is the wait?", ["The wait is about twelve weeks."], True),
        ("When is the concert?", ["The concert is on 12 December."], True),
        ("When is the concert?", ["The concert is at the cathedral, black tops."], False),
        ("When did he sail?", ["He sailed to Canada in 1903."], True),  # a year is a when
        ("Which night is quiz night?", ["Quiz night is on Tuesdays now."], True),
        ("What time does it start?", ["It starts at the hall."], False),
        ("Who teaches the class?", ["The class meets at the hall."], True),  # no kind asked
    ],
)
def test_answers_kind(question: str, texts: list[str], holds: bool) -> None:
    assert query.answers_kind(question, texts) is holds


def test_query_says_not_found_when_the_page_lacks_the_kind_asked(tmp_path: Path) -> None:
    root = tmp_path / "store"
    Memory.init(root).close()
    words_only = {"embeddings": {"enabled": False}, "engine": {"router": "lexical"}}
    with Memory.open(root, overrides=words_only) as mem:
        mem.bundle_add("stars", "Stargazing: the telescope, lenses and star camps")
        mem.ingest([("lens.md", f"# Barlow lens for the telescope\n\n{LENS}\n")])
        mem.consolidate()
        cost = mem.query("How much was the Barlow lens from First Light Optics?")
        order = mem.query("What is the order number of the Barlow lens for the telescope?")
    off = {**words_only, "engine": {"router": "lexical", "answer_kind": False}}
    with Memory.open(root, overrides=off) as mem:
        cost_off = mem.query("How much was the Barlow lens from First Light Optics?")
    assert cost["not_found"] and cost["nearest"], cost
    assert not order["not_found"], order
    assert not cost_off["not_found"], cost_off
