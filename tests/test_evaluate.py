"""Evaluate: the questions it scores, what it records, and the expected paths that are not
files (warned of on stderr by the CLI)."""

from __future__ import annotations

import json

import pytest

from helpers import BREAD, run_cli
from memdir.engine import runs
from memdir.errors import HarnessChanged, InvalidInput
from memdir.service import Memory


def test_evaluate_without_questions_records_nothing(eng: Memory) -> None:
    eng.ingest([("bread.md", BREAD)])
    [article] = eng.consolidate()["articles"]
    questions = eng.root / "evals/questions.yaml"
    questions.write_text(
        f"questions:\n  - question: how often to feed a sourdough starter\n"
        f"    expected: [{article}, wiki/kitchen/none/missing.md]\n",
        encoding="utf-8",
    )
    first = eng.evaluate()
    assert first["missing_expected"] == ["wiki/kitchen/none/missing.md"]
    runs_before = (eng.root / ".memdir/runs.tsv").read_text(encoding="utf-8")
    episodes_before = sorted((eng.root / "episodes").rglob("*.md"))
    questions.write_text("questions: []\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match="no questions"):
        eng.evaluate()
    assert (eng.root / ".memdir/runs.tsv").read_text(encoding="utf-8") == runs_before
    assert sorted((eng.root / "episodes").rglob("*.md")) == episodes_before
    questions.write_text(
        f"questions:\n  - question: how often to feed a sourdough starter\n"
        f"    expected: [{article}, wiki/kitchen/none/missing.md]\n",
        encoding="utf-8",
    )
    again = eng.evaluate()  # the pinned set again: compared with the first run
    assert again["previous_mrr"] == first["mrr"] and again["label"] == "hold"


def test_evaluate_warns_on_stderr_of_each_missing_expected_path(kitchen: Memory) -> None:
    kitchen.ingest([("bread.md", BREAD)])
    [article] = kitchen.consolidate()["articles"]
    missing = ["wiki/kitchen/none/gone.md", "wiki/kitchen/typo/artcle.md"]
    (kitchen.root / "evals/questions.yaml").write_text(
        "questions:\n"
        "  - question: how often to feed a sourdough starter\n"
        f"    expected: [{article}, {missing[0]}]\n"
        "  - question: what gives bread a crisp crust\n"
        f"    expected: [{missing[1]}]\n",
        encoding="utf-8",
    )
    root = str(kitchen.root)
    text = run_cli("--root", root, "evaluate")
    assert text.returncode == 0, text.stderr
    warnings = text.stderr.decode().splitlines()
    assert warnings == [f"warning: expected path not found: {p}" for p in missing]
    assert text.stdout.decode().startswith("run=evaluate ")
    assert "warning" not in text.stdout.decode()

    as_json = run_cli("--root", root, "evaluate", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["missing_expected"] == missing  # stdout stays JSON
    assert as_json.stderr.decode().splitlines() == warnings


def test_the_question_set_is_pinned_like_the_harness(eng: Memory) -> None:
    """A changed question set is refused until accepted, and then starts a new baseline;
    every run row names the harness, program and questions it judged against."""
    eng.ingest([("bread.md", BREAD)])
    [article] = eng.consolidate()["articles"]
    questions = eng.root / "evals/questions.yaml"
    questions.write_text(
        f"questions:\n  - question: how often to feed a sourdough starter\n"
        f"    expected: [{article}]\n",
        encoding="utf-8",
    )
    first = eng.evaluate()
    assert first["previous_mrr"] is None
    questions.write_text(
        "questions:\n  - question: zebra migration routes\n    expected: [x.md]\n",
        encoding="utf-8",
    )
    runs_before = (eng.root / ".memdir/runs.tsv").read_text(encoding="utf-8")
    with pytest.raises(HarnessChanged, match="questions.yaml changed"):
        eng.evaluate()
    assert (eng.root / ".memdir/runs.tsv").read_text(encoding="utf-8") == runs_before
    accepted = eng.harness_accept()
    assert accepted["questions"] != accepted["previous_questions"]
    fresh = eng.evaluate()
    assert fresh["previous_mrr"] is None and fresh["label"] != "regress"  # a new baseline
    rows = [r for r in runs.history(eng.root) if r.verb in ("evaluate", "refine", "consolidate")]
    assert rows and all(
        {"harness_sha", "program_sha", "questions_sha"} <= set(r.notes) for r in rows
    )
    shas = [r.notes["questions_sha"] for r in rows if r.verb == "evaluate"]
    assert len(shas) == 2 and shas[0] != shas[1]


def test_refine_evaluate_and_query_refuse_an_edited_harness(eng: Memory) -> None:
    eng.ingest([("bread.md", BREAD)])
    [article] = eng.consolidate()["articles"]
    (eng.root / "evals/questions.yaml").write_text(
        f"questions:\n  - question: sourdough starter\n    expected: [{article}]\n",
        encoding="utf-8",
    )
    harness = eng.root / "HARNESS.md"
    harness.write_text(harness.read_text(encoding="utf-8") + "\n- a rule added by hand\n")
    for verb in (eng.refine, eng.evaluate, lambda: eng.query("sourdough starter")):
        with pytest.raises(HarnessChanged, match="HARNESS.md changed"):
            verb()
    eng.harness_accept()
    assert eng.query("sourdough starter")["found"]
