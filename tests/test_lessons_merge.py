"""Lessons that say the same thing in other words merge (by meaning with the offline
embedder, by words with embeddings off), with thresholds that hold on pairs kept aside; and
insights that come from what a run did, not from fixed strings."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memdir.engine import reflect
from memdir.files.store import Store
from memdir.service import Memory
from memdir.settings import Settings
from memdir.vectors.embedder import get_embedder

PAIRS = Path(__file__).parent.parent / "bench" / "data" / "lessons" / "pairs.json"
BRIEF = "Ana prefers short answers without bullet lists."
BRIEF_AGAIN = "Keep replies to Ana brief and in plain prose, not lists."
TONER = "The printer on the second floor needs new toner."


def checked(likeness: reflect.Likeness) -> float:
    """The accuracy of ``likeness`` at its threshold on the pairs kept aside."""
    pairs = [p for p in json.loads(PAIRS.read_text())["pairs"] if p["split"] == "check"]
    right = 0
    for pair in pairs:
        score = likeness.pairwise([pair["a"], pair["b"]])[0][1]
        right += (score >= likeness.threshold) == pair["same"]
    return right / len(pairs)


def test_the_meaning_threshold_holds_on_the_pairs_kept_aside() -> None:
    meaning = reflect.by_meaning(get_embedder(Settings().embeddings).embed)
    assert checked(meaning) >= 0.85


def test_the_words_threshold_holds_on_the_pairs_kept_aside() -> None:
    assert checked(reflect.WORDS) >= 0.8


def episode(n: int, insight: str) -> reflect.Episode:
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=n)
    return reflect.Episode(
        f"episodes/life/{n}.md", f"life-{n}", "life", at, "s", "success", (insight,)
    )


def test_a_paraphrase_joins_the_lesson_and_keeps_its_name() -> None:
    first = reflect.lessons_from([episode(1, BRIEF), episode(2, TONER)], reflect.WORDS)
    later = reflect.lessons_from(
        [episode(1, BRIEF), episode(2, TONER), episode(3, BRIEF_AGAIN)], reflect.WORDS
    )
    assert len(first) == 2 and len(later) == 2
    merged = next(lesson for lesson in later if len(lesson.episodes) == 2)
    assert merged.text == BRIEF  # the oldest wording names the lesson
    assert merged.lesson_id == next(x for x in first if x.text == BRIEF).lesson_id
    assert len(reflect.lessons_from([episode(1, BRIEF), episode(3, BRIEF_AGAIN)])) == 2


def test_insights_naming_other_bundles_stay_two_lessons() -> None:
    kitchen = "2 source(s) nearest to bundle kitchen fit no scope: widen the scope of kitchen."
    garden = "3 source(s) nearest to bundle garden fit no scope: widen the scope of garden."
    both = [episode(1, kitchen), episode(2, garden)]
    assert len(reflect.lessons_from(both, reflect.WORDS)) == 1  # alike in words...
    assert len(reflect.lessons_from(both, reflect.WORDS, ["kitchen", "garden"])) == 2


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "store")


@pytest.mark.parametrize("enabled", [True, False])
def test_reflect_merges_lessons_in_other_words(store: Path, enabled: bool) -> None:
    with Memory.open(store, overrides={"embeddings": {"enabled": enabled}}) as mem:
        for insight in (BRIEF, TONER, BRIEF_AGAIN):
            mem.episode_add(kind="life", situation=f"noted: {insight}", insights=[insight])
        result = mem.reflect()
    assert result["lessons_merged_by"] == ("meaning" if enabled else "words")
    lessons = [line for line in (store / "LESSONS.md").read_text().splitlines() if "**" in line]
    assert len(lessons) == 2
    brief = next(line for line in lessons if "Ana" in line)
    assert BRIEF in brief and "2 episodes" in brief and BRIEF_AGAIN not in brief


def test_insights_say_what_the_run_did_and_still_merge(store: Path) -> None:
    with Memory.open(store, overrides={"embeddings": {"enabled": False}}) as mem:
        mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, oven")
        mem.ingest([("tax.md", "# Taxes\n\nThe tax return is due in May.\n")])
        one = mem.consolidate()
        mem.ingest([("car.md", "# Car\n\nThe car needs new tyres.\n")])
        mem.ingest([("vet.md", "# Vet\n\nThe cat sees the vet on Tuesday.\n")])
        two = mem.consolidate()
    assert len(one["quarantined"]) == 1 and len(two["quarantined"]) == 2
    episodes = sorted((store / "episodes" / "operational").rglob("*consolidate*.md"))
    texts = [p.read_text() for p in episodes]
    assert any("1 source(s) nearest to bundle kitchen" in t for t in texts)
    assert any("2 source(s) nearest to bundle kitchen" in t for t in texts)
    lessons = [
        line for line in (store / "LESSONS.md").read_text().splitlines() if "kitchen" in line
    ]
    assert len(lessons) == 1 and "2 episodes" in lessons[0]
