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
        # an identifier: a code, a reference, a number that names something
        ("What sail number is my boat?", ["Paid 285 pounds for the boat park."], False),
        ("What sail number is my boat?", ["The boat's sail number is 3011."], True),
        ("What is my UTR number?", ["Owe HMRC 3,410 by 31/01, filed 2026."], False),
        ("What is the booking reference?", ["Booked, reference QX7RTB."], True),
        ("What's the code for the key safe?", ["Key safe code 4719."], True),
        ("What's the frame number of my bike?", ["A red Dawes, 10km in 50mins."], False),
        ("What is the number of guests?", ["Ninety guests."], True),  # a count, not an id
        ("Who asked where the numbers came from?", ["Candidate C asked."], True),
        ("What is Aisha's phone number?", ["Aisha pays £995 a month, code 4719."], False),
        ("What is Aisha's phone number?", ["Aisha's mobile is 07700 900123."], True),
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


def test_query_says_not_found_when_the_page_holds_no_identifier(tmp_path: Path) -> None:
    """A question that asks for a number that names something is "not found" on a page
    with amounts and dates but no code, and answered when the check is off."""
    root = tmp_path / "store"
    Memory.init(root).close()
    # floor 0: the check alone decides ("number" is a word no page uses, which the floor
    # would weigh heavily)
    words_only = {
        "embeddings": {"enabled": False},
        "engine": {"router": "lexical", "answer_floor": 0.0},
    }
    with Memory.open(root, overrides=words_only) as mem:
        mem.bundle_add("dinghy", "Sailing the dinghy: the club, the boat and races")
        mem.ingest(
            [
                (
                    "fees.md",
                    "# Sailing club fees\n\nPaid the sailing club membership for the boat, "
                    "285 pounds, on 12 March.\n",
                )
            ]
        )
        mem.consolidate()
        sail = mem.query("What is the sail number of the club boat?")
    off = {**words_only, "engine": {**words_only["engine"], "answer_kind": False}}
    with Memory.open(root, overrides=off) as mem:
        sail_off = mem.query("What is the sail number of the club boat?")
    assert sail["not_found"] and sail["nearest"], sail
    assert not sail_off["not_found"], sail_off
