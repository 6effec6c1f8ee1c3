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


_BEST = re.compile(r"best was '([^']+)' at ([0-9.]+)")


def insights(
    outcome: consolidating.Outcome,
    audit: dict[str, Any],
    folded: threads.Folded | None = None,
) -> list[str]:
    """What the run's facts teach, from those facts: which bundle the misfits were nearest
    and how near, how many drafts fell back and why, which sources did not parse, how drift
    moved and which defects it holds. The figures change from run to run; reflect merges
    insights that say the same thing in other words into one lesson."""
    found = []
    nearest: dict[str, list[float]] = {}
    for q in outcome.quarantined:
        if m := _BEST.search(q["reason"]):
            nearest.setdefault(m.group(1), []).append(float(m.group(2)))
    for bundle, scores in sorted(nearest.items()):
        found.append(
            f"{len(scores)} source(s) nearest to bundle {bundle} (best score {max(scores):.2f}) "
            f"fit no scope: widen the scope of {bundle} or add a bundle for them."
        )
    fallbacks = [n for n in outcome.notes if "fallback" in n or "refused" in n]
    if fallbacks:
        found.append(
            f"The model writer fell back to the extractive writer on {len(fallbacks)} "
            f"source(s), first: {fallbacks[0][:160]}."
        )
    if outcome.skipped:
        first = outcome.skipped[0].split(":", 1)[0]
        found.append(
            f"{len(outcome.skipped)} source(s) stay in the inbox because their frontmatter "
            f"does not parse (first: {first}): fix them."
        )
    delta = int(audit.get("delta") or 0)
    if delta > 0:
        parts = audit.get("components") or {}
        kinds = ", ".join(
            f"{name} {part['count']}" for name, part in sorted(parts.items()) if part.get("count")
        )
        found.append(
            f"Drift rose from {audit.get('previous')} to {audit['drift']} after consolidating "
            f"({kinds or 'no defect named'}): run refine and read its defects."
        )
    if folded is not None and folded.unrouted:
        names = ", ".join(sorted({str(u["thread"]) for u in folded.unrouted})[:3])
        found.append(
            f"{len(folded.unrouted)} thread(s) fit no bundle scope ({names}): their facts stay "
            "on their thread pages; add a bundle for them or widen a scope."
        )
    return found
