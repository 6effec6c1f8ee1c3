""" "Not found" is an answer: below the relevance floor query says so and shows the nearest
pointers as such; search still returns pointers; evaluate scores not-found questions."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import run_cli
from memdir.files.store import Store
from memdir.service import Memory

NOTES = [
    (
        "loaf.md",
        "# Everyday loaf\n\nThe everyday sourdough loaf is 500 g flour, 375 g water and 10 g "
        "salt. It bakes at 250 C in the Dutch oven for 45 minutes.\n",
    ),
    (
        "starter.md",
        "# Starter feeds\n\nThe starter is fed 1:1:1 by weight twice before a bake. It lives "
        "in the fridge during the week.\n",
    ),
]
ANSWERABLE = "What temperature does the everyday loaf bake at?"
UNANSWERABLE = "What is the password of the bank account?"
NEAR_MISS = "What is the password for the starter jar?"  # shares a word, answers nothing


@pytest.fixture(params=[True, False], ids=["meaning", "words"])
def bread(request: pytest.FixtureRequest, tmp_path: Path) -> Memory:
    root = Store.init(tmp_path / "store")
    mem = Memory.open(root, overrides={"embeddings": {"enabled": request.param}})
    mem.bundle_add("bread", "Baking sourdough bread and keeping the starter alive")
    mem.ingest(NOTES)
    mem.consolidate()
    request.addfinalizer(mem.close)
    return mem


def test_below_the_floor_query_says_not_found_with_the_nearest(bread: Memory) -> None:
    found = bread.query(ANSWERABLE)
    assert found["found"] and not found["not_found"]
    top = found["answers"][0]
    assert "everyday-loaf" in top["path"] and top["relevance"] >= found["relevance"]["floor"]
    missing = bread.query(UNANSWERABLE)
    assert missing["not_found"] and not missing["found"] and missing["answers"] == []
    assert missing["message"] == "nothing in this memory answers the question"
    assert all(a["relevance"] < missing["relevance"]["floor"] for a in missing["nearest"])
    # search keeps returning pointers: query decides, search does not
    assert bread.search("bank account password bake")


def test_the_floor_is_a_setting(tmp_path: Path, bread: Memory) -> None:
    bread.close()
    lax = Memory.open(bread.root, overrides={"engine": {"answer_floor": 0.0}})
    try:
        result = lax.query(NEAR_MISS)
        assert result["found"] and "starter" in result["answers"][0]["path"]
    finally:
        lax.close()
    strict = Memory.open(bread.root, overrides={"engine": {"answer_floor": 10.0}})
    try:
        result = strict.query(ANSWERABLE)
        assert result["not_found"] and result["nearest"]
        assert "everyday-loaf" in result["nearest"][0]["path"]
    finally:
        strict.close()


def test_the_cli_shows_nearest_pointers_as_such(bread: Memory) -> None:
    done = run_cli(
        "query", "What is the password of the bank account and the loaf?", cwd=bread.root
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    if "nothing in this memory answers the question" in out:
        assert "[tier" not in out
    done = run_cli("query", ANSWERABLE, cwd=bread.root)
    assert b"nothing in this memory" not in done.stdout and b"[tier" in done.stdout


def test_evaluate_scores_not_found_questions(bread: Memory) -> None:
    [article] = [
        str(p.relative_to(bread.root)) for p in (bread.root / "wiki").rglob("*everyday-loaf*.md")
    ]
    (bread.root / "evals").mkdir(exist_ok=True)
    (bread.root / "evals" / "questions.yaml").write_text(
        "questions:\n"
        f"  - question: {ANSWERABLE}\n    expected: [{article}]\n"
        f"  - question: {UNANSWERABLE}\n    not_found: true\n"
    )
    result = bread.evaluate()
    assert result["not_found"] == {"questions": 1, "correct": 1, "rate": 1.0}
    assert result["hit@1"] == 1.0 and result["mrr"] == 1.0  # the answerable one only
    row = next(r for r in result["rows"] if r["expected"] == "not found")
    assert row["correct"] and not row["found"]
