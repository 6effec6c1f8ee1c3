"""The numeric end of the cached BM25 ranking: the weighted frequency FTS5's bm25() computes,
exactly, and the best rows that pass a search's filters, best first."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def frequency(counts: np.ndarray[Any, Any], weights: tuple[float, ...]) -> np.ndarray[Any, Any]:
    """The weighted frequency bm25() computes from per-column counts, to the last bit.

    FTS5 adds a column's weight once per occurrence, column by column; while every weight
    so far is a whole number the sum is exact in any order, after that it is added the
    same way, one occurrence at a time.
    """
    import numpy as np

    f = np.zeros(counts.shape[0], dtype=np.float64)
    whole = True
    for column, weight in enumerate(weights):
        n = counts[:, column]
        if whole and weight.is_integer():
            f += weight * n
            continue
        whole = False
        at = np.flatnonzero(n)
        k = 1
        while at.size:
            f[at] += weight
            k += 1
            at = at[n[at] >= k]
    return f


def filtered(
    conn: sqlite3.Connection,
    score: np.ndarray[Any, Any],
    matched: np.ndarray[Any, Any],
    condition: str,
    params: Sequence[Any],
    want: int,
) -> list[tuple[sqlite3.Row, float]]:
    """The best ``want`` matching rows that pass the filters, best first (ties by id)."""
    import numpy as np

    if not matched.size:
        return []
    values = score[matched]

    def best(count: int) -> np.ndarray[Any, Any]:
        """The ``count`` best matches (more on a tie), best first, ties by id."""
        if count < matched.size:
            cut = np.partition(values, matched.size - count)[matched.size - count]
            chosen = matched[values >= cut]
        else:
            chosen = matched
        ordered: np.ndarray[Any, Any] = chosen[np.lexsort((chosen, -score[chosen]))]
        return ordered

    out: list[tuple[sqlite3.Row, float]] = []
    start, step = 0, max(4 * want, 64)
    sql = (
        "SELECT d.id, d.path, d.title, d.type, d.memory_kind, d.thread, d.user, d.created, "
        "d.episode_id FROM docs d "
        f"WHERE d.id IN (SELECT value FROM json_each(?)){condition}"
    )
    while start < matched.size and len(out) < want:
        chunk = best(start + step)[start : start + step]
        passed = {
            int(r["id"]): r
            for r in conn.execute(sql, ("[" + ",".join(map(str, chunk.tolist())) + "]", *params))
        }
        for doc in chunk.tolist():
            row = passed.get(int(doc))
            if row is not None:
                out.append((row, -float(score[doc])))
                if len(out) == want:
                    break
        start += step
        step *= 4
    return out
