"""What a consolidate run's operational episode says: its situation, actions, outcome and
insights, each derived from what the run did (counts, quarantines, drift before and after)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import consolidate as consolidating
    from . import threads


def situation(outcome: consolidating.Outcome, turns: int) -> str:
    done = [
        f"{len(outcome.articles)} article(s) filed",
        f"{len(outcome.quarantined)} quarantined",
    ]
    if outcome.skipped:
        done.append(f"{len(outcome.skipped)} skipped")
    if turns:
        done.append(f"{turns} turn(s) folded")
    return "consolidate: " + ", ".join(done)


def outcome(outcome: consolidating.Outcome, turns: int) -> str:
    """success when every source was filed, partial when some were not, failure when none
    was and something was waiting."""
    filed = bool(outcome.articles) or turns > 0
    missed = bool(outcome.quarantined) or bool(outcome.skipped)
    if not missed:
        return "success"
    return "partial" if filed else "failure"


def actions(
    outcome: consolidating.Outcome, folded: threads.Folded, audit: dict[str, Any]
) -> list[str]:
    actions = [f"filed {p}" for p in outcome.articles[:20]]
    actions += [f"quarantined {q['source']}: {q['reason']}" for q in outcome.quarantined[:20]]
    actions += [f"skipped {s}" for s in outcome.skipped[:20]]
    actions += [f"folded turns into {p}" for p in folded.pages[:20]]
    before = audit.get("previous")
    actions.append(f"drift {before if before is not None else '-'} -> {audit['drift']}")
    return actions


_BEST = re.compile(r"best was '([^']+)'")


def insights(outcome: consolidating.Outcome, audit: dict[str, Any]) -> list[str]:
    """What the run's facts teach, worded so that the same lesson recurs across runs (a
    lesson merges insights with the same words)."""
    insights = []
    for bundle in sorted(
        {m.group(1) for q in outcome.quarantined if (m := _BEST.search(q["reason"]))}
    ):
        insights.append(
            f"Sources nearest to bundle {bundle} still fit no scope: widen the scope of {bundle} "
            "or add a bundle for them."
        )
    if any("fallback" in n for n in outcome.notes):
        insights.append("The model writer failed and the extractive writer filled in.")
    if outcome.skipped:
        insights.append("Sources whose frontmatter does not parse stay in the inbox: fix them.")
    if int(audit.get("delta") or 0) > 0:
        insights.append("Drift rose after consolidating: run refine and read its defects.")
    return insights
