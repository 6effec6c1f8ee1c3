"""BM25 for words with many matches: FTS5's own scores, computed from cached postings.

FTS5's ``bm25()`` reads the positions and the length of every matching row before it can
take the top ten, so a word found in a quarter of 100k documents costs about 100 ms per
query. For such words the index keeps the word's postings in ``fts_postings``: the ids of
the rows that contain it, the weighted term frequency (title counted three times, as in
the query) and each row's length in tokens. A query then sums FTS5's formula over those
arrays with numpy, using the table's current statistics (row count, average length, the
number of rows per word), so the scores are the ones ``bm25()`` gives, to the last digit
that matters.

The cache is derived and never wrong, only stale: every change to the FTS table made
while postings exist is logged in ``fts_log`` with a sequence number, and a query masks
the cached entries of logged rows and reads those rows afresh. A word whose log grows
past a bound is recomputed; a sync that changes more rows than the log holds drops the
whole cache. Deleting ``index.db`` loses nothing.

Nothing here is used for queries with few matches (FTS5 is fast there), for words that
tokenize to more than one token (FTS5 phrases), or without numpy (the ``vectors`` extra).
"""

from __future__ import annotations

import functools
import math
import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import numpy as np

K1 = 1.2  # FTS5's bm25() constants
B = 0.75
WEIGHTS = (3.0, 1.0)  # title, body: the weights the query passes to bm25()


class Tuning(NamedTuple):
    """When the cached path is used (defaults measured at 100k documents)."""

    numpy_min: int = 2000  # total matches below which FTS5 ranks directly
    cache_min: int = 500  # a word with at least this many matches is cached
    dirty_max: int = 256  # changed rows over a cached word before it is recomputed
    log_max: int = 20000  # changes one sync may log before the cache is dropped


DEFAULT = Tuning()


class Postings(NamedTuple):
    ids: np.ndarray[Any, Any]
    w: np.ndarray[Any, Any]  # weighted term frequency
    dl: np.ndarray[Any, Any]  # row length in tokens (all columns)

    @property
    def df(self) -> int:
        return int(self.ids.shape[0])


def varints(blob: bytes) -> list[int]:
    """Decode the SQLite varints FTS5 stores in its averages and docsize records."""
    out: list[int] = []
    i = 0
    size = len(blob)
    while i < size:
        value = 0
        for n in range(9):
            byte = blob[i]
            i += 1
            if n == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(value)
    return out


def averages(conn: sqlite3.Connection) -> tuple[int, int]:
    """``(rows, tokens in all columns)`` of ``docs_fts``, as bm25() reads them."""
    row = conn.execute("SELECT block FROM docs_fts_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    values = varints(bytes(row[0]))
    return values[0], sum(values[1:])


def idf(rows: int, df: int) -> float:
    value = math.log((rows - df + 0.5) / (df + 0.5))
    return value if value > 0.0 else 1e-6


def note_changes(
    conn: sqlite3.Connection, doc_ids: Sequence[int], tuning: Tuning = DEFAULT
) -> None:
    """Log FTS rows changed in this transaction (nothing to do while no postings exist)."""
    if not doc_ids:
        return
    if conn.execute("SELECT 1 FROM fts_postings LIMIT 1").fetchone() is None:
        return
    logged = int(conn.execute("SELECT count(*) FROM fts_log").fetchone()[0])
    if logged + len(doc_ids) > tuning.log_max:
        conn.execute("DELETE FROM fts_postings")
        conn.execute("DELETE FROM fts_log")
        return
    seq = int(
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('fts_seq', '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1 "
            "RETURNING CAST(value AS INTEGER)"
        ).fetchone()[0]
    )
    conn.executemany(
        "INSERT INTO fts_log(doc_id, seq) VALUES (?, ?) "
        "ON CONFLICT(doc_id) DO UPDATE SET seq = excluded.seq",
        [(doc_id, seq) for doc_id in doc_ids],
    )


class _Tokenizer:
    """FTS5's own tokenizer (same options as ``docs_fts``) over a private temp table."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.memdir_tok USING fts5("
            "title, body, tokenize = 'porter unicode61 remove_diacritics 2')"
        )
        conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.memdir_tok_i "
            "USING fts5vocab(temp, memdir_tok, instance)"
        )

    def words(self, words: Sequence[str]) -> list[str] | None:
        """One token per word, or None when a word is several tokens (an FTS5 phrase)."""
        conn = self.conn
        conn.executemany(
            "INSERT INTO temp.memdir_tok(rowid, title, body) VALUES (?, '', ?)",
            list(enumerate(words, start=1)),
        )
        try:
            found: dict[int, list[str]] = {}
            for doc, term in conn.execute("SELECT doc, term FROM temp.memdir_tok_i"):
                found.setdefault(int(doc), []).append(str(term))
        finally:
            conn.execute("DELETE FROM temp.memdir_tok")
        tokens = []
        for n in range(1, len(words) + 1):
            got = found.get(n, [])
            if len(got) != 1:
                return None
            tokens.append(got[0])
        return tokens

    def rows(
        self, rows: Iterable[tuple[int, str, str]], tokens: set[str]
    ) -> dict[str, list[tuple[int, float, int]]]:
        """``token -> [(doc_id, weighted tf, length)]`` for the given documents."""
        conn = self.conn
        conn.executemany("INSERT INTO temp.memdir_tok(rowid, title, body) VALUES (?, ?, ?)", rows)
        try:
            lengths = {
                int(doc): sum(varints(bytes(sz)))
                for doc, sz in conn.execute("SELECT id, sz FROM temp.memdir_tok_docsize")
            }
            freq: dict[tuple[str, int], float] = {}
            marks = ",".join("?" * len(tokens))
            for term, doc, col, count in conn.execute(
                "SELECT term, doc, col, count(*) FROM temp.memdir_tok_i "
                f"WHERE term IN ({marks}) GROUP BY term, doc, col",
                sorted(tokens),
            ):
                weight = WEIGHTS[0] if col == "title" else WEIGHTS[1]
                key = (str(term), int(doc))
                freq[key] = freq.get(key, 0.0) + weight * int(count)
        finally:
            conn.execute("DELETE FROM temp.memdir_tok")
        out: dict[str, list[tuple[int, float, int]]] = {}
        for (term, doc), w in freq.items():
            out.setdefault(term, []).append((doc, w, lengths[doc]))
        return out


def _phrase(word: str) -> str:
    return '"' + word.replace('"', "") + '"'


def _compute(conn: sqlite3.Connection, word: str, rows: int, tokens: int) -> Postings:
    """Every row containing ``word``, with FTS5's own numbers (its score inverted)."""
    import numpy as np

    found = conn.execute(
        "SELECT f.rowid, -bm25(docs_fts, ?, ?), s.sz FROM docs_fts f "
        "JOIN docs_fts_docsize s ON s.id = f.rowid WHERE docs_fts MATCH ?",
        (*WEIGHTS, _phrase(word)),
    ).fetchall()
    ids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
    score = np.fromiter((r[1] for r in found), dtype=np.float64, count=len(found))
    dl = np.fromiter((sum(varints(bytes(r[2]))) for r in found), dtype=np.float64, count=len(found))
    if not found:
        return Postings(ids, score, dl)
    avgdl = tokens / rows
    x = score / idf(rows, len(found))
    k = K1 * (1.0 - B + B * dl / avgdl)
    w = np.rint(x * k / (K1 + 1.0 - x) * 2.0) / 2.0  # weights 3 and 1: whole numbers
    return Postings(ids, w, dl)


def _load(conn: sqlite3.Connection, token: str) -> tuple[int, Postings] | None:
    import numpy as np

    row = conn.execute(
        "SELECT seq, ids, w, dl FROM fts_postings WHERE term = ?", (token,)
    ).fetchone()
    if row is None:
        return None
    return int(row[0]), Postings(
        np.frombuffer(row[1], dtype=np.int64),
        np.frombuffer(row[2], dtype=np.float32).astype(np.float64),
        np.frombuffer(row[3], dtype=np.float32).astype(np.float64),
    )


def _store(
    conn: sqlite3.Connection,
    fresh: dict[str, Postings],
    seq: int,
    generation: str | None,
    dirty_max: int,
) -> None:
    """Keep freshly computed postings, unless the index changed since they were read."""
    import numpy as np

    if not fresh or conn.in_transaction:
        return
    timeout = conn.execute("PRAGMA busy_timeout").fetchone()[0]
    conn.execute("PRAGMA busy_timeout = 0")  # a search never waits on a writer for this
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(timeout)}")
    try:
        now = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        if (now[0] if now else None) == generation:
            conn.executemany(
                "INSERT OR REPLACE INTO fts_postings(term, seq, ids, w, dl) VALUES (?,?,?,?,?)",
                [
                    (
                        token,
                        seq,
                        p.ids.astype(np.int64).tobytes(),
                        p.w.astype(np.float32).tobytes(),
                        p.dl.astype(np.float32).tobytes(),
                    )
                    for token, p in fresh.items()
                ],
            )
            # Words too stale to be used again would be recomputed anyway: drop them,
            # then the log entries no cached word needs.
            conn.execute(
                "DELETE FROM fts_postings WHERE "
                "(SELECT count(*) FROM fts_log l WHERE l.seq > fts_postings.seq) > ?",
                (dirty_max,),
            )
            conn.execute("DELETE FROM fts_log WHERE seq <= (SELECT min(seq) FROM fts_postings)")
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.execute("ROLLBACK")


@functools.cache
def _numpy() -> bool:
    """numpy comes with the ``vectors`` extra; without it FTS5 ranks every query."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def rank(
    conn: sqlite3.Connection,
    words: Sequence[str],
    condition: str,
    params: Sequence[Any],
    want: int,
    tuning: Tuning = DEFAULT,
) -> list[tuple[sqlite3.Row, float]] | None:
    """The best ``want`` rows of ``docs`` (filtered by ``condition``) for an OR of words.

    Returns ``(docs row, bm25 score)`` pairs best first, or None when FTS5 should rank
    the query itself (few matches, a word that is a phrase).
    """
    if not words or not _numpy():
        return None
    began = not conn.in_transaction
    if began:
        conn.execute("BEGIN")  # one snapshot for every read below
    try:
        found = _rank(conn, words, condition, params, want, tuning)
    finally:
        if began:
            conn.execute("COMMIT")
    if found is None:
        return None
    ranked, fresh, seq, generation = found
    _store(conn, fresh, seq, generation, tuning.dirty_max)
    return ranked


def _rank(
    conn: sqlite3.Connection,
    words: Sequence[str],
    condition: str,
    params: Sequence[Any],
    want: int,
    tuning: Tuning,
) -> tuple[list[tuple[sqlite3.Row, float]], dict[str, Postings], int, str | None] | None:
    import numpy as np

    tokenizer = _Tokenizer(conn)
    tokens = tokenizer.words(words)
    if tokens is None:
        return None
    rows, total = averages(conn)
    if rows == 0:
        return None
    seq_row = conn.execute("SELECT value FROM meta WHERE key = 'fts_seq'").fetchone()
    seq = int(seq_row[0]) if seq_row else 0
    gen_row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    generation = str(gen_row[0]) if gen_row else None

    cached: dict[str, tuple[int, Postings]] = {}
    counts: dict[str, int] = {}
    for token in tokens:
        if token in cached or token in counts:
            continue
        hit = _load(conn, token)
        if hit is not None:
            cached[token] = hit
        else:
            row = conn.execute("SELECT doc FROM docs_fts_vocab WHERE term = ?", (token,)).fetchone()
            counts[token] = int(row[0]) if row else 0
    oldest = min((s for s, _ in cached.values()), default=seq)
    log = {
        int(doc): int(s)
        for doc, s in conn.execute("SELECT doc_id, seq FROM fts_log WHERE seq > ?", (oldest,))
    }
    # A cached word with too many changed rows is recomputed, like an uncached one.
    for token, (s, postings) in list(cached.items()):
        if sum(1 for v in log.values() if v > s) > tuning.dirty_max:
            del cached[token]
            counts[token] = postings.df
    approx = sum(p.df for _, p in cached.values()) + sum(counts.values())
    if approx < tuning.numpy_min:
        return None

    fresh: dict[str, Postings] = {}  # computed now; kept when the word is common
    for word, token in zip(words, tokens, strict=True):
        if token in counts and token not in fresh:
            fresh[token] = _compute(conn, word, rows, total)
    # Rows changed since a cached word was computed: read them again.
    stale = sorted({doc for doc, s in log.items() if any(s > cs for cs, _ in cached.values())})
    again: dict[str, list[tuple[int, float, int]]] = {}
    if stale:
        marks = ",".join(str(doc) for doc in stale)
        again = tokenizer.rows(
            (
                (int(r[0]), str(r[1] or ""), str(r[2] or ""))
                for r in conn.execute(
                    f"SELECT rowid, title, body FROM docs_fts WHERE rowid IN ({marks})"
                ).fetchall()
            ),
            set(cached),
        )

    current: dict[str, Postings] = dict(fresh)
    for token, (s, postings) in cached.items():
        changed = np.array([doc for doc, v in log.items() if v > s], dtype=np.int64)
        kept = ~np.isin(postings.ids, changed) if changed.size else slice(None)
        extra = [(d, w, n) for d, w, n in again.get(token, []) if log.get(d, 0) > s]
        current[token] = Postings(
            np.concatenate([postings.ids[kept], np.array([e[0] for e in extra], np.int64)]),
            np.concatenate([postings.w[kept], np.array([e[1] for e in extra], np.float64)]),
            np.concatenate([postings.dl[kept], np.array([e[2] for e in extra], np.float64)]),
        )

    top = max((int(p.ids.max()) for p in current.values() if p.df), default=-1)
    if top < 0:
        return [], {}, seq, generation
    avgdl = total / rows
    score = np.zeros(top + 1, dtype=np.float64)
    for token in tokens:  # phrase order, as bm25() sums them
        p = current[token]
        if not p.df:
            continue
        weight = idf(rows, p.df)
        score[p.ids] += weight * (p.w * (K1 + 1.0)) / (p.w + K1 * (1.0 - B + B * p.dl / avgdl))
    ranked = _filtered(conn, score, condition, params, want)
    keep = {t: p for t, p in fresh.items() if p.df >= tuning.cache_min}
    return ranked, keep, seq, generation


def _filtered(
    conn: sqlite3.Connection,
    score: np.ndarray[Any, Any],
    condition: str,
    params: Sequence[Any],
    want: int,
) -> list[tuple[sqlite3.Row, float]]:
    """The best ``want`` matching rows that pass the filters, best first (ties by id)."""
    import numpy as np

    matched = np.flatnonzero(score)
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
        "SELECT d.id, d.path, d.title, d.type, d.memory_kind FROM docs d "
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
