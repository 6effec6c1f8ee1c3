"""The signals hybrid search adds to the fused ranks: a candidate's thread (its strength,
whether the whole thread matches), the dates and users a query names, and the turns just
before and after a candidate. Each reads the index and returns the candidates re-sorted
with its boost (:func:`memdir.retrieval.fusion.add_boost`).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from ..index import lookups
from .fusion import Fused, add_boost

if TYPE_CHECKING:
    from ..index.search import Filters


def thread_match(
    conn: sqlite3.Connection,
    rank_of: dict[str, int],
    fused: list[Fused[int]],
    weight: float,
    rrf_k: float,
) -> tuple[list[Fused[int]], dict[int, int]]:
    """Lift candidates whose whole thread matches the query (see :meth:`_thread_ranking`).

    A candidate in the thread ranked r gains ``weight / (rrf_k + r)``. Returns the
    re-sorted candidates and each boosted candidate's thread rank.
    """
    if not fused:
        return fused, {}
    thread_of = lookups.threads_of(conn, [f.key for f in fused], shared=True)
    k = rrf_k
    ranks = {d: rank_of[t] for d, t in thread_of.items() if t in rank_of}
    boosts = {d: weight / (k + r) for d, r in ranks.items()}
    return add_boost(fused, "thread_match", boosts), ranks


def date_boost(
    conn: sqlite3.Connection, query: str, fused: list[Fused[int]], weight: float, scale_days: float
) -> list[Fused[int]]:
    """Lift candidates made on or near a date the query names ("on 3 June, 2023")."""
    from .datehints import closeness, names_a_date, parse_time, windows

    if not fused or not names_a_date(query):
        return fused
    made = {
        int(row[0]): when
        for row in lookups.created(conn, [f.key for f in fused])
        if (when := parse_time(row[1])) is not None
    }
    # A month named without a year ("in June") is looked for in the candidates' years.
    found = windows(query, years={when.year for when in made.values()})
    if not found:
        return fused
    boosts = {key: weight * closeness(when, found, scale_days) for key, when in made.items()}
    return add_boost(fused, "date", boosts)


def user_boost(
    conn: sqlite3.Connection, named: list[str], fused: list[Fused[int]], weight: float
) -> list[Fused[int]]:
    """Lift candidates written by a user the query names ("What did Melanie paint?")."""
    wanted = {n.lower() for n in named}
    boosts = {
        int(r[0]): weight
        for r in lookups.users(conn, [f.key for f in fused])
        if str(r[1]).lower() in wanted
    }
    return add_boost(fused, "user", boosts)


def thread_boost(
    conn: sqlite3.Connection, fused: list[Fused[int]], weight: float
) -> list[Fused[int]]:
    """Lift candidates whose thread holds other strong candidates.

    A thread's strength is the sum of its three best fused scores; each candidate
    of the thread gains ``weight`` times it. Documents without a thread gain nothing.
    """
    if not fused:
        return fused
    thread_of = lookups.threads_of(conn, [f.key for f in fused], shared=True)
    scores: dict[str, list[float]] = {}
    for item in fused:
        if item.key in thread_of:
            scores.setdefault(thread_of[item.key], []).append(item.score)
    strength = {t: sum(sorted(v, reverse=True)[:3]) for t, v in scores.items()}
    boosts = {key: weight * strength[t] for key, t in thread_of.items()}
    return add_boost(fused, "thread", boosts)


def neighbour_boost(
    conn: sqlite3.Connection, fused: list[Fused[int]], weight: float, flt: Filters
) -> list[Fused[int]]:
    """Lift turns whose neighbours in the same thread (the turns just before and after) rank.

    A document gains ``weight`` times the fused score of each adjacent turn of its
    thread that is itself a candidate, so a run of relevant turns rises together.
    """
    if not fused:
        return fused
    score = {f.key: f.score for f in fused}
    boosts: dict[int, float] = {}
    for doc_id, neighbours in lookups.thread_neighbours(conn, list(score), flt):
        lift = sum(score.get(n, 0.0) for n in neighbours)
        if lift:
            boosts[doc_id] = weight * lift
    return add_boost(fused, "neighbour", boosts)
