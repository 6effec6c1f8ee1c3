"""query puts first a newer page that answers the question with another value: a later note
changed a fact in other words, consolidation kept it apart, and both pages answer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from memdir.engine import query
from memdir.engine.terms import term_set
from memdir.service import Memory

OLD = "Spice Route quoted 42 per head for the sharing feast"
NEW = "Spice Route says the per head cost for the sharing feast goes to 48"


def _answer(
    path: str, claim: str, date: str, relevance: float, *, title: str = "Caterer"
) -> query.Answer:
    return query.Answer(
        path, title, 1, 1.0, relevance=relevance, claims=[title, claim], dates=["", date]
    )


def _order(answers: list[query.Answer], rule: query.Newer | None = None) -> list[str]:
    q = ["spice", "route", "charge", "head"]
    query.prefer_newer(answers, rule or query.Newer(), q, None)
    return [a.path for a in answers]


def test_the_newer_value_goes_first() -> None:
    answers = [
        _answer("wiki/wedding/caterer/quote.md", OLD, "2026-02-02", 1.4),
        _answer("wiki/wedding/costs/price-rise.md", NEW, "2026-05-01", 0.9),
    ]
    assert _order(answers) == ["wiki/wedding/costs/price-rise.md", "wiki/wedding/caterer/quote.md"]
    assert answers[0].newer_of == "wiki/wedding/caterer/quote.md"
    assert answers[0].to_dict()["newer_than"] == "wiki/wedding/caterer/quote.md"
    assert "newer_than" not in answers[1].to_dict()


@pytest.mark.parametrize(
    ("other", "why"),
    [
        (_answer("wiki/bees/caterer/price.md", NEW, "2026-05-01", 0.9), "another bundle"),
        (_answer("wiki/wedding/costs/rise.md", NEW, "2026-01-01", 0.9), "older"),
        (_answer("wiki/wedding/costs/rise.md", NEW, "2026-05-01", 0.5), "far less relevant"),
        (
            _answer("wiki/wedding/costs/rise.md", NEW.replace("48", "42"), "2026-05-01", 0.9),
            "the same value",
        ),
        (
            _answer("wiki/wedding/dress/fit.md", "Fitting at 48 Hill Street", "2026-05-01", 0.9),
            "another fact",
        ),
        (_answer("wiki/wedding/costs/rise.md", NEW, "", 0.9), "no date"),
    ],
)
def test_the_best_stays_first(other: query.Answer, why: str) -> None:
    best = _answer("wiki/wedding/caterer/quote.md", OLD, "2026-02-02", 1.4)
    assert _order([best, other])[0] == best.path, why


def test_a_ratio_above_one_turns_the_rule_off() -> None:
    answers = [
        _answer("wiki/wedding/caterer/quote.md", OLD, "2026-02-02", 1.4),
        _answer("wiki/wedding/costs/price-rise.md", NEW, "2026-05-01", 1.3),
    ]
    assert _order(answers, query.Newer(ratio=2.0))[0] == "wiki/wedding/caterer/quote.md"


def test_the_newest_of_several_goes_first() -> None:
    answers = [
        _answer("wiki/wedding/caterer/quote.md", OLD, "2026-02-02", 1.4),
        _answer("wiki/wedding/costs/a.md", NEW, "2026-03-01", 0.9),
        _answer("wiki/wedding/costs/b.md", NEW.replace("48", "51"), "2026-06-01", 0.8),
    ]
    assert _order(answers)[0] == "wiki/wedding/costs/b.md"


def test_a_line_citing_nothing_is_not_the_claim_compared() -> None:
    """The extractive writer's ``Main terms: ...`` takeaway cites no source; when it is the
    best page's line nearest the question, the dated claim nearest it is compared instead,
    so the newer page still goes first."""
    best = query.Answer(
        "wiki/wedding/caterer/quote.md",
        "Caterer",
        1,
        1.0,
        relevance=1.4,
        claims=["Caterer", OLD, "Main terms: spice, route, head, charge."],
        dates=["", "2026-02-02", ""],
    )
    newer = _answer("wiki/wedding/costs/price-rise.md", NEW, "2026-05-01", 0.9)
    answers = [best, newer]
    q = sorted(term_set("What does Spice Route charge per head?"))
    query.prefer_newer(answers, query.Newer(), q, None)
    assert [a.path for a in answers][0] == "wiki/wedding/costs/price-rise.md"


def _embed(table: dict[str, Sequence[float]]):  # type: ignore[no-untyped-def]
    np = pytest.importorskip("numpy")

    def embed(texts: Sequence[str]) -> object:
        return np.array([table[t] for t in texts], dtype=np.float64)

    return embed


def test_by_meaning_the_claims_must_be_close(monkeypatch: pytest.MonkeyPatch) -> None:
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(query, "_CLAIMS", {})
    near, far = [0.8, 0.6, 0.0], [0.0, 0.6, 0.8]
    table = {"q": [1.0, 0.0, 0.0], OLD: [1.0, 0.0, 0.0], NEW: near, "Caterer": [0.0, 1.0, 0.0]}
    for text, vec in table.items():
        query._CLAIMS[text] = np.array(vec)
    qvec = np.array(table["q"])

    def run(new_vec: list[float]) -> str:
        query._CLAIMS[NEW] = np.array(new_vec)
        answers = [
            _answer("wiki/wedding/caterer/quote.md", OLD, "2026-02-02", 1.4),
            _answer("wiki/wedding/costs/price-rise.md", NEW, "2026-05-01", 0.9),
        ]
        query.prefer_newer(answers, query.Newer(similarity=0.5), ["caterer"], qvec)
        return answers[0].path

    assert run(near) == "wiki/wedding/costs/price-rise.md"  # cosine 0.8 with the old claim
    assert run(far) == "wiki/wedding/caterer/quote.md"  # cosine 0.0: another fact


def test_query_answers_with_the_newer_note_first(tmp_path: Path) -> None:
    """Through the service, words only: two notes on the caterer's price, the later one in
    other words, each its own page; asked in the older note's words, the older page is the
    most relevant, and the newer one goes first unless the rule is off."""
    root = tmp_path / "store"
    Memory.init(root).close()
    words_only = {"embeddings": {"enabled": False}, "engine": {"router": "lexical"}}
    with Memory.open(root, overrides=words_only) as mem:
        mem.bundle_add("wedding", "Planning the wedding: the caterer, venue and guests")
        mem.ingest(
            [
                (
                    "quote.md",
                    "---\ntitle: Caterer quote\ndate: 2026-02-02\n---\n"
                    "The caterer Spice Route quoted 42 per head for the wedding feast. "
                    "The wedding tasting is on 7 March.\n",
                )
            ]
        )
        mem.consolidate()
        mem.ingest(
            [
                (
                    "rise.md",
                    "---\ntitle: Caterer price rise\ndate: 2026-05-01\n---\n"
                    "Caterer email: the per head price from Spice Route is 48 now. "
                    "We will sign anyway.\n",
                )
            ]
        )
        mem.consolidate()
    asked = "What did Spice Route quote per head for the wedding feast?"
    off = {**words_only, "engine": {"router": "lexical", "answer_newer_ratio": 2.0}}
    with Memory.open(root, overrides=off) as mem:
        before = mem.query(asked)["answers"]
    with Memory.open(root, overrides=words_only) as mem:
        after = mem.query(asked)["answers"]
    assert len(before) == 2 and before[0]["path"].endswith("caterer-quote.md"), before
    assert "newer_than" not in before[0]
    assert after[0]["path"].endswith("caterer-price-rise.md"), after
    assert after[0]["newer_than"] == before[0]["path"]
    assert after[1]["path"] == before[0]["path"]
