"""BM25 for words with many matches: FTS5's own scores, computed from cached postings.

FTS5's ``bm25()`` reads the positions and the length of every matching row before it can
take the top ten, so a word found in a quarter of 100k documents costs about 100 ms per
query. For such words the index keeps the word's postings: the ids of the rows that
contain it, their term frequencies and each row's length in tokens. A query then sums
FTS5's formula over those arrays with numpy, in FTS5's order of operations, using the
table's current statistics (row count, average length, the number of rows per word), so
the scores are the ones ``bm25()`` gives.

Two FTS tables are served, each described by a :class:`Table`: ``docs_fts`` (postings in
``fts_postings``, log ``fts_log``; its weights are fixed, title 3 and body 1, so the
weighted frequency is stored) and ``passages_fts`` of hybrid search (``passage_postings``,
``passage_log``; the weight of its ``context`` column is a setting, so the frequency of
each column is stored and weighted at query time, as ``bm25()`` adds them up).

The cache is derived and never wrong, only stale: every change to the FTS table made
while postings exist is logged with a sequence number, and a query masks the cached
entries of logged rows and reads those rows afresh. A word whose log grows past a bound
is recomputed; a sync that changes more rows than the log holds drops the whole cache.
Deleting ``index.db`` loses nothing.

Nothing here is used for queries with few matches (FTS5 is fast there), for words that
tokenize to more than one token (FTS5 phrases), or without numpy (the ``vectors`` extra).
"""

from __future__ import annotations

import functools
import math
import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .topk import filtered, frequency

if TYPE_CHECKING:
    import numpy as np

K1 = 1.2  # FTS5's bm25() constants
B = 0.75
WEIGHTS = (3.0, 1.0)  # title, body: the weights the docs query passes to bm25()
TOKENIZE = "porter unicode61 remove_diacritics 2"  # the options of every FTS table here


class Table(NamedTuple):
    """An FTS5 table whose common words are cached, and where its cache lives."""

    fts: str  # the FTS5 table
    columns: int  # its column count
    fixed: tuple[float, ...] | None  # weights folded into the stored frequency, or None:
    # one frequency per column is stored and weighted at query time
    postings: str  # term -> seq, ids, w (frequencies, float32), dl (row lengths)
    log: str  # rows changed since postings were computed: doc_id -> seq
    seq_key: str  # meta key of the log's sequence
    generation_key: str  # meta key that changes with every write to the FTS table
    vocab: str | None = None  # its fts5vocab "row" table (None: a temp one is made)

    @property
    def stored(self) -> tuple[tuple[float, ...], ...]:
        """The weights of each stored frequency (one bm25() call each computes it)."""
        if self.fixed is not None:
            return (self.fixed,)
        return tuple(
            tuple(1.0 if c == n else 0.0 for c in range(self.columns)) for n in range(self.columns)
        )


# The generation of docs_fts is the index's own (``Index._bump``); passages_fts has none,
# so :func:`note_changes` advances its sequence at every write, cache or not.
DOCS = Table(
    "docs_fts", 2, WEIGHTS, "fts_postings", "fts_log", "fts_seq", "generation", "docs_fts_vocab"
)
PASSAGES = Table(
    "passages_fts", 3, None, "passage_postings", "passage_log", "passage_seq", "passage_seq"
)


class Tuning(NamedTuple):
    """When the cached path is used (defaults measured at 100k documents)."""

    numpy_min: int = 2000  # total matches below which FTS5 ranks directly
    cache_min: int = 500  # a word with at least this many matches is cached
    dirty_max: int = 256  # changed rows over a cached word before it is recomputed
    log_max: int = 20000  # changes one sync may log before the cache is dropped


DEFAULT = Tuning()


class Postings(NamedTuple):
    ids: np.ndarray[Any, Any]
    w: np.ndarray[Any, Any]  # term frequencies, one column per ``Table.stored`` weights
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


def averages(conn: sqlite3.Connection, table: Table = DOCS) -> tuple[int, int]:
    """``(rows, tokens in all columns)`` of the FTS table, as bm25() reads them."""
    row = conn.execute(f"SELECT block FROM {table.fts}_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return 0, 0
    values = varints(bytes(row[0]))
    return values[0], sum(values[1:])


def idf(rows: int, df: int) -> float:
    value = math.log((rows - df + 0.5) / (df + 0.5))
    return value if value > 0.0 else 1e-6


def _bump_seq(conn: sqlite3.Connection, table: Table) -> int:
    return int(
        conn.execute(
            "INSERT INTO meta(key, value) VALUES (?, '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(value AS INTEGER) + 1 "
            "RETURNING CAST(value AS INTEGER)",
            (table.seq_key,),
        ).fetchone()[0]
    )


def note_changes(
    conn: sqlite3.Connection,
    doc_ids: Iterable[int],
    tuning: Tuning = DEFAULT,
    table: Table = DOCS,
) -> None:
    """Log FTS rows changed in this transaction (nothing is logged while no postings exist)."""
    doc_ids = sorted(set(doc_ids))
    if not doc_ids:
        return
    owns_generation = table.generation_key == table.seq_key
    if conn.execute(f"SELECT 1 FROM {table.postings} LIMIT 1").fetchone() is None:
        if owns_generation:
            _bump_seq(conn, table)  # postings computed before this write are not kept
        return
    logged = int(conn.execute(f"SELECT count(*) FROM {table.log}").fetchone()[0])
    if logged + len(doc_ids) > tuning.log_max:
        drop(conn, table)
        return
    seq = _bump_seq(conn, table)
    conn.executemany(
        f"INSERT INTO {table.log}(doc_id, seq) VALUES (?, ?) "
        "ON CONFLICT(doc_id) DO UPDATE SET seq = excluded.seq",
        [(doc_id, seq) for doc_id in doc_ids],
    )


def drop(conn: sqlite3.Connection, table: Table) -> None:
    """Forget every cached word of the table (its FTS table was rewritten or dropped)."""
    conn.execute(f"DELETE FROM {table.postings}")
    conn.execute(f"DELETE FROM {table.log}")
    if table.generation_key == table.seq_key:
        _bump_seq(conn, table)


def forget_absent_terms(conn: sqlite3.Connection, table: Table) -> int:
    """Drop the cached postings of words the FTS table no longer holds (after a purge:
    the word itself may be what was purged). Returns how many were dropped."""
    vocab = _vocab(conn, table)
    cur = conn.execute(f"DELETE FROM {table.postings} WHERE term NOT IN (SELECT term FROM {vocab})")
    return cur.rowcount or 0


class _Tokenizer:
    """FTS5's own tokenizer (the options of the tables here) over a private temp table."""

    def __init__(self, conn: sqlite3.Connection, table: Table) -> None:
        self.conn = conn
        self.table = table
        self.name = name = f"memdir_tok{table.columns}"
        columns = ", ".join(f"c{n}" for n in range(table.columns))
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name} USING fts5("
            f"{columns}, tokenize = '{TOKENIZE}')"
        )
        conn.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{name}_i "
            f"USING fts5vocab(temp, {name}, instance)"
        )

    def words(self, words: Sequence[str]) -> list[str] | None:
        """One token per word, or None when a word is several tokens (an FTS5 phrase)."""
        conn = self.conn
        conn.executemany(
            f"INSERT INTO temp.{self.name}(rowid, c0) VALUES (?, ?)",
            list(enumerate(words, start=1)),
        )
        try:
            found: dict[int, list[str]] = {}
            for doc, term in conn.execute(f"SELECT doc, term FROM temp.{self.name}_i"):
                found.setdefault(int(doc), []).append(str(term))
        finally:
            conn.execute(f"DELETE FROM temp.{self.name}")
        tokens = []
        for n in range(1, len(words) + 1):
            got = found.get(n, [])
            if len(got) != 1:
                return None
            tokens.append(got[0])
        return tokens

    def rows(
        self, rows: Iterable[Sequence[Any]], tokens: set[str]
    ) -> dict[str, list[tuple[int, tuple[float, ...], int]]]:
        """``token -> [(doc_id, frequencies, length)]`` for rows given as (id, *columns)."""
        conn = self.conn
        count = self.table.columns
        names = ", ".join(f"c{n}" for n in range(count))
        marks = ",".join("?" * (count + 1))
        conn.executemany(f"INSERT INTO temp.{self.name}(rowid, {names}) VALUES ({marks})", rows)
        stored = self.table.stored
        try:
            lengths = {
                int(doc): sum(varints(bytes(sz)))
                for doc, sz in conn.execute(f"SELECT id, sz FROM temp.{self.name}_docsize")
            }
            freq: dict[tuple[str, int], list[float]] = {}
            marks = ",".join("?" * len(tokens))
            for term, doc, col, n in conn.execute(
                f"SELECT term, doc, col, count(*) FROM temp.{self.name}_i "
                f"WHERE term IN ({marks}) GROUP BY term, doc, col",
                sorted(tokens),
            ):
                column = int(str(col)[1:])
                key = (str(term), int(doc))
                sums = freq.setdefault(key, [0.0] * len(stored))
                for i, weights in enumerate(stored):
                    sums[i] += weights[column] * int(n)
        finally:
            conn.execute(f"DELETE FROM temp.{self.name}")
        out: dict[str, list[tuple[int, tuple[float, ...], int]]] = {}
        for (term, doc), w in freq.items():
            out.setdefault(term, []).append((doc, tuple(w), lengths[doc]))
        return out


def _phrase(word: str) -> str:
    return '"' + word.replace('"', "") + '"'


def _compute(conn: sqlite3.Connection, table: Table, word: str, rows: int, tokens: int) -> Postings:
    """Every row containing ``word``, with FTS5's own numbers (its scores inverted).

    One ``bm25()`` per stored frequency: with the weights of ``Table.stored`` each gives
    the frequency FTS5 adds up for those weights, recovered from the score.
    """
    import numpy as np

    stored = table.stored
    calls = ", ".join(f"-bm25({table.fts}, " + ", ".join("?" * table.columns) + ")" for _ in stored)
    found = conn.execute(
        f"SELECT f.rowid, s.sz, {calls} FROM {table.fts} f "
        f"JOIN {table.fts}_docsize s ON s.id = f.rowid WHERE {table.fts} MATCH ?",
        (*(w for weights in stored for w in weights), _phrase(word)),
    ).fetchall()
    n = len(found)
    ids = np.fromiter((r[0] for r in found), dtype=np.int64, count=n)
    dl = np.fromiter((sum(varints(bytes(r[1]))) for r in found), dtype=np.float64, count=n)
    score = np.array([r[2:] for r in found], dtype=np.float64).reshape(n, len(stored))
    if not found:
        return Postings(ids, score, dl)
    avgdl = tokens / rows
    x = score / idf(rows, n)
    k = (K1 * (1.0 - B + B * dl / avgdl))[:, None]
    w = np.rint(x * k / (K1 + 1.0 - x) * 2.0) / 2.0  # whole (or half) numbers
    return Postings(ids, w, dl)


def _load(conn: sqlite3.Connection, table: Table, token: str) -> tuple[int, Postings] | None:
    import numpy as np

    row = conn.execute(
        f"SELECT seq, ids, w, dl FROM {table.postings} WHERE term = ?", (token,)
    ).fetchone()
    if row is None:
        return None
    return int(row[0]), Postings(
        np.frombuffer(row[1], dtype=np.int64),
        np.frombuffer(row[2], dtype=np.float32).astype(np.float64).reshape(-1, len(table.stored)),
        np.frombuffer(row[3], dtype=np.float32).astype(np.float64),
    )


def _store(
    conn: sqlite3.Connection,
    table: Table,
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
        if _meta(conn, table.generation_key) == generation:
            conn.executemany(
                f"INSERT OR REPLACE INTO {table.postings}(term, seq, ids, w, dl) "
                "VALUES (?,?,?,?,?)",
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
                f"DELETE FROM {table.postings} WHERE "
                f"(SELECT count(*) FROM {table.log} l WHERE l.seq > {table.postings}.seq) > ?",
                (dirty_max,),
            )
            conn.execute(
                f"DELETE FROM {table.log} WHERE seq <= (SELECT min(seq) FROM {table.postings})"
            )
        conn.execute("COMMIT")
    except sqlite3.Error:
        conn.execute("ROLLBACK")


def _meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return str(row[0]) if row else None


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
    *,
    table: Table = DOCS,
    weights: Sequence[float] | None = None,
) -> list[tuple[sqlite3.Row, float]] | None:
    """The best ``want`` rows of ``docs`` (filtered by ``condition``) for an OR of words.

    Ranks as ``ORDER BY bm25(<table>, *weights)`` over ``<table> MATCH`` joined to
    ``docs d`` would (``weights`` default to the table's fixed ones); equal scores go
    by id. Returns ``(docs row, bm25 score)`` pairs best first, or None when FTS5 should
    rank the query itself (few matches, a word that is a phrase, other weights than a
    table's fixed ones).
    """
    if weights is None:
        weights = table.fixed
    if not words or not weights or not _numpy():
        return None
    weights = tuple(float(w) for w in weights)
    if len(weights) != table.columns or not all(math.isfinite(w) for w in weights):
        return None
    if table.fixed is not None and weights != table.fixed:
        return None
    began = not conn.in_transaction
    if began:
        conn.execute("BEGIN")  # one snapshot for every read below
    try:
        found = _rank(conn, table, weights, words, condition, params, want, tuning)
    finally:
        if began:
            conn.execute("COMMIT")
    if found is None:
        return None
    ranked, fresh, seq, generation = found
    _store(conn, table, fresh, seq, generation, tuning.dirty_max)
    return ranked


def _vocab(conn: sqlite3.Connection, table: Table) -> str:
    if table.vocab is not None:
        return table.vocab
    name = f"temp.memdir_vocab_{table.fts}"
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5vocab(main, {table.fts}, row)"
    )
    return name


def _rank(
    conn: sqlite3.Connection,
    table: Table,
    weights: tuple[float, ...],
    words: Sequence[str],
    condition: str,
    params: Sequence[Any],
    want: int,
    tuning: Tuning,
) -> tuple[list[tuple[sqlite3.Row, float]], dict[str, Postings], int, str | None] | None:
    import numpy as np

    tokenizer = _Tokenizer(conn, table)
    tokens = tokenizer.words(words)
    if tokens is None:
        return None
    rows, total = averages(conn, table)
    if rows == 0:
        return None
    seq = int(_meta(conn, table.seq_key) or 0)
    generation = _meta(conn, table.generation_key)

    cached: dict[str, tuple[int, Postings]] = {}
    counts: dict[str, int] = {}
    vocab = _vocab(conn, table)
    for token in tokens:
        if token in cached or token in counts:
            continue
        hit = _load(conn, table, token)
        if hit is not None:
            cached[token] = hit
        else:
            row = conn.execute(f"SELECT doc FROM {vocab} WHERE term = ?", (token,)).fetchone()
            counts[token] = int(row[0]) if row else 0
    oldest = min((s for s, _ in cached.values()), default=seq)
    log = {
        int(doc): int(s)
        for doc, s in conn.execute(f"SELECT doc_id, seq FROM {table.log} WHERE seq > ?", (oldest,))
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
            fresh[token] = _compute(conn, table, word, rows, total)
    # Rows changed since a cached word was computed: read them again.
    stale = sorted({doc for doc, s in log.items() if any(s > cs for cs, _ in cached.values())})
    again: dict[str, list[tuple[int, tuple[float, ...], int]]] = {}
    if stale:
        marks = ",".join(str(doc) for doc in stale)
        found = conn.execute(
            f"SELECT rowid, * FROM {table.fts} WHERE rowid IN ({marks})"
        ).fetchall()
        again = tokenizer.rows(
            ((int(r[0]), *(str(v or "") for v in r[1 : 1 + table.columns])) for r in found),
            set(cached),
        )

    width = len(table.stored)
    current: dict[str, Postings] = dict(fresh)
    for token, (s, postings) in cached.items():
        changed = np.array([doc for doc, v in log.items() if v > s], dtype=np.int64)
        kept = ~np.isin(postings.ids, changed) if changed.size else slice(None)
        extra = [(d, w, n) for d, w, n in again.get(token, []) if log.get(d, 0) > s]
        current[token] = Postings(
            np.concatenate([postings.ids[kept], np.array([e[0] for e in extra], np.int64)]),
            np.concatenate(
                [
                    postings.w[kept],
                    np.array([e[1] for e in extra], np.float64).reshape(len(extra), width),
                ]
            ),
            np.concatenate([postings.dl[kept], np.array([e[2] for e in extra], np.float64)]),
        )

    top = max((int(p.ids.max()) for p in current.values() if p.df), default=-1)
    if top < 0:
        return [], {}, seq, generation
    avgdl = total / rows
    score = np.zeros(top + 1, dtype=np.float64)
    matched = np.zeros(top + 1, dtype=bool)
    for token in tokens:  # phrase order, as bm25() sums them
        p = current[token]
        if not p.df:
            continue
        weight = idf(rows, p.df)
        f = p.w[:, 0] if table.fixed is not None else frequency(p.w, weights)
        # bm25()'s own expression, operation by operation (the same doubles)
        norm = K1 * ((1.0 - B) + (B * p.dl) / avgdl)
        score[p.ids] += weight * ((f * (K1 + 1.0)) / (f + norm))
        matched[p.ids] = True
    ranked = filtered(conn, score, np.flatnonzero(matched), condition, params, want)
    keep = {t: p for t, p in fresh.items() if p.df >= tuning.cache_min}
    return ranked, keep, seq, generation
