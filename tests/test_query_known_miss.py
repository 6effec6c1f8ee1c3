"""The "known miss" rule of query: a page on the question's subject that lacks the words the
question asks about, words other pages of the wiki do use, is "not found"."""

from __future__ import annotations

import math

from memdir.engine import query
from memdir.engine.terms import term_set


def _df(pages: list[str]) -> tuple[dict[str, int], int]:
    df: dict[str, int] = {}
    for text in pages:
        for t in term_set(text):
            df[t] = df.get(t, 0) + 1
    return df, len(pages)


PAGES = [
    "Monstera care. Water the monstera every ten days and wipe its leaves.",
    "Snake plant. Repotted the snake plant on 3 March into a terracotta pot.",
    "Fiddle leaf fig. The fig wants bright light and water once a week.",
]


def test_a_word_the_wiki_knows_elsewhere_counts_against_the_page() -> None:
    df, total = _df(PAGES)
    q = list(term_set("When did I repot the monstera?"))
    miss = query.known_missing(q, [PAGES[0]], df, total)
    assert miss > 0.4  # "repot" is on the snake plant's page, not on the monstera's
    snake = list(term_set("When did I repot the snake plant?"))
    assert query.known_missing(snake, [PAGES[1]], df, total) == 0.0


def test_a_word_no_page_uses_is_not_evidence() -> None:
    df, total = _df(PAGES)
    q = list(term_set("How often should the monstera get a drink?"))
    # "drink" and "often" are in no page: a paraphrase, not a sign the answer is elsewhere
    assert query.known_missing(q, [PAGES[0]], df, total) == 0.0


def test_the_share_is_idf_weighted() -> None:
    df, total = _df(PAGES)
    q = list(term_set("When did I repot the monstera?"))
    idf = {t: math.log((total + 1) / (df.get(t, 0) + 0.5)) for t in q}
    have = term_set(PAGES[0])
    expect = sum(w for t, w in idf.items() if df.get(t, 0) and t not in have) / sum(idf.values())
    assert math.isclose(query.known_missing(q, [PAGES[0]], df, total), expect)
    assert query.known_missing([], [PAGES[0]], df, total) == 0.0


def _recall(question: str, pages: list[str]) -> query.Recall:
    recall = query.Recall(question)
    for i, text in enumerate(pages):
        recall.answers.append(query.Answer(f"wiki/p/{i}.md", f"p{i}", 1, 1.0, claims=[text]))
    return recall


def test_judge_says_not_found_on_a_known_miss(tmp_path) -> None:  # type: ignore[no-untyped-def]
    wiki = tmp_path / "wiki" / "plants"
    wiki.mkdir(parents=True)
    for i, text in enumerate(PAGES):
        (wiki / f"p{i}.md").write_text(f"# p{i}\n\n{text}\n", encoding="utf-8")
    asked = _recall("When did I repot the monstera?", [PAGES[0]])
    query.judge(tmp_path, asked, floor=0.0, embed=None, known_miss=0.4)
    assert not asked.found and asked.nearest
    off = _recall("When did I repot the monstera?", [PAGES[0]])
    query.judge(tmp_path, off, floor=0.0, embed=None, known_miss=1.0)
    assert off.found
    right = _recall("When did I repot the snake plant?", [PAGES[1]])
    query.judge(tmp_path, right, floor=0.0, embed=None, known_miss=0.4)
    assert right.found
