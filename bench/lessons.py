"""Calibrate the lesson merge: how alike two lessons must be to be one.

    python bench/lessons.py [bench/data/lessons/pairs.json] [--json]

Each pair of the file is two lesson sentences and whether they say the same thing. For the
two likenesses reflect uses (the cosine of the offline MiniLM vectors, and the Jaccard
overlap of content terms used when embeddings are off), the threshold that classifies the
"calibrate" pairs best is found (the midpoint of the best gap), then the accuracy of that
threshold and of the one memdir ships (memdir.engine.reflect) is printed on both parts; the
"check" pairs never choose anything.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memdir.engine import reflect
from memdir.settings import Settings

DEFAULT = Path(__file__).parent / "data" / "lessons" / "pairs.json"


def accuracy(scored: list[tuple[float, bool]], threshold: float) -> float:
    right = sum(1 for score, same in scored if (score >= threshold) == same)
    return right / len(scored) if scored else 0.0


def best_threshold(scored: list[tuple[float, bool]]) -> float:
    values = sorted({s for s, _ in scored})
    cuts = [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)] or values
    return max(cuts, key=lambda t: (accuracy(scored, t), -abs(t - 0.5)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pairs", nargs="?", default=str(DEFAULT))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    pairs = json.loads(Path(args.pairs).read_text(encoding="utf-8"))["pairs"]
    from memdir.vectors.embedder import get_embedder

    likenesses = {
        "meaning": (
            reflect.by_meaning(get_embedder(Settings().embeddings).embed),
            reflect.MEANING_THRESHOLD,
        ),
        "words": (reflect.WORDS, reflect.WORDS_THRESHOLD),
    }
    report: dict[str, Any] = {}
    for name, (likeness, shipped) in likenesses.items():
        scored: dict[str, list[tuple[float, bool]]] = {"calibrate": [], "check": []}
        for pair in pairs:
            score = float(likeness.pairwise([pair["a"], pair["b"]])[0][1])
            scored[pair["split"]].append((score, bool(pair["same"])))
        chosen = best_threshold(scored["calibrate"])
        report[name] = {
            "pairs": {k: len(v) for k, v in scored.items()},
            "calibrated": round(chosen, 3),
            "shipped": shipped,
            **{
                f"{which}_accuracy_{part}": round(accuracy(scored[part], t), 3)
                for which, t in (("calibrated", chosen), ("shipped", shipped))
                for part in ("calibrate", "check")
            },
        }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, row in report.items():
            print(
                f"{name}: calibrated {row['calibrated']} (shipped {row['shipped']}); accuracy "
                f"calibrate {row['shipped_accuracy_calibrate']}, check "
                f"{row['shipped_accuracy_check']} ({row['pairs']['calibrate']}+"
                f"{row['pairs']['check']} pairs)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
