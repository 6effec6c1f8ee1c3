"""evaluate: run ``evals/questions.yaml`` through query; hit@k, MRR, recall per tier,
bodies and tokens read. A question marked ``not_found: true`` is right when query answers
"not found"; it is scored apart (``not_found``) and left out of hit@k and MRR."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from ..doc.text import read_utf8
from ..errors import InvalidInput
from .query import Recall

K = (1, 3, 5)


def load_questions(root: Path) -> list[dict[str, Any]]:
    path = root / "evals" / "questions.yaml"
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(read_utf8(path)) or {}
    except yaml.YAMLError as exc:
        raise InvalidInput(f"evals/questions.yaml does not parse: {exc}") from None
    items = data.get("questions") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InvalidInput("evals/questions.yaml: expected a 'questions' list")
    out = []
    for n, item in enumerate(items, start=1):
        if not isinstance(item, dict) or not isinstance(item.get("question"), str):
            raise InvalidInput(f"evals/questions.yaml: item {n} needs a 'question'")
        expected = item.get("expected") or []
        if isinstance(expected, str):
            expected = [expected]
        not_found = item.get("not_found", False)
        if not isinstance(not_found, bool):
            raise InvalidInput(f"evals/questions.yaml: item {n}: 'not_found' must be true or false")
        if not_found and expected:
            raise InvalidInput(
                f"evals/questions.yaml: item {n}: a question whose answer is 'not found' "
                "expects no article"
            )
        out.append(
            {
                "question": item["question"],
                "expected": [str(e) for e in expected],
                "not_found": not_found,
            }
        )
    return out


def score(
    questions: Sequence[dict[str, Any]],
    ask: Callable[[str], Recall],
    count: Callable[[str], int],
    root: Path,
) -> dict[str, Any]:
    rows = []
    hits = dict.fromkeys(K, 0)
    rr_total = 0.0
    tier_found = {0: 0, 1: 0, 2: 0}
    expected_total = 0
    bodies = 0
    tokens = 0
    unanswerable = 0
    said_not_found = 0
    for q in questions:
        recall = ask(q["question"])
        if q.get("not_found"):
            # Its right answer is "nothing in this memory answers the question".
            unanswerable += 1
            said_not_found += 0 if recall.found else 1
            rows.append(
                {
                    "question": q["question"],
                    "expected": "not found",
                    "found": recall.found,
                    "correct": not recall.found,
                    "nearest": [a.path for a in (recall.answers or recall.nearest)][:3],
                }
            )
            continue
        ranked = [a.path for a in recall.answers]
        expected = set(q["expected"])
        expected_total += len(expected)
        rank = next((i + 1 for i, p in enumerate(ranked) if p in expected), None)
        for k in K:
            hits[k] += 1 if rank is not None and rank <= k else 0
        rr_total += 1.0 / rank if rank else 0.0
        for a in recall.answers:
            if a.path in expected:
                tier_found[a.tier] += 1
        read_tokens = sum(
            count((root / p).read_text(encoding="utf-8", errors="replace"))
            for p in recall.indexes_read + recall.bodies_read
        )
        bodies += len(recall.bodies_read)
        tokens += read_tokens
        rows.append(
            {
                "question": q["question"],
                "expected": q["expected"],
                "rank": rank,
                "tiers": sorted({a.tier for a in recall.answers}),
                "bodies_read": len(recall.bodies_read),
                "tokens_read": read_tokens,
            }
        )
    n = max(1, len(questions) - unanswerable)
    return {
        "questions": len(questions),
        "not_found": {
            "questions": unanswerable,
            "correct": said_not_found,
            "rate": round(said_not_found / unanswerable, 4) if unanswerable else None,
        },
        **{f"hit@{k}": round(hits[k] / n, 4) for k in K},
        "mrr": round(rr_total / n, 4),
        "recall_by_tier": {
            str(t): round(v / max(1, expected_total), 4) for t, v in tier_found.items()
        },
        "missing_expected": sorted(
            {p for q in questions for p in q["expected"] if not (root / p).is_file()}
        ),
        "bodies_read_avg": round(bodies / n, 2),
        "tokens_read_avg": round(tokens / n, 1),
        "rows": rows,
    }
