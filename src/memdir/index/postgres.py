"""The Postgres engine of the index: BM25 and vectors of many stores in one shared database.

With ``[index] engine = "postgres"`` a search ranks in PostgreSQL: BM25 over the documents
(title x3, body x1), BM25 over the passages of hybrid search (title x3, what the document
says x1, what the previous document of its thread says x ``search.previous_weight``) and
the nearest chunk vectors (pgvector, exact inner product), each with the filters of
:class:`memdir.index.search.Filters` (zone, superseded, path prefix, kind, type, ``where``
on frontmatter, paths left out). The rest stays in the store's own SQLite index, which is
rebuilt from the files as ever: parsing, the turn DAG, threads and their ranking, the
boosts of hybrid search, snippets and titles (docs/postgres.md says what lives where).

Postgres holds what the local index derives, keyed by ``(store, path)``: one database
serves many stores, and replicas of one store (processes over the same files, or clones
kept in step by ``memdir sync``) share its rows. The words are FTS5's own tokens (the local
index's tokenizer, read through ``fts5vocab``), so the scores are the formula of FTS5's
``bm25()`` over the same statistics and the results are the SQLite engine's.

:meth:`PgIndex.sync` brings the rows of a store in step with the local index: it pushes
the paths the local change log (:mod:`memdir.index.pglog`) names since the last push, in
one transaction under the store's advisory lock, so one writer at a time changes a store; a
search that finds the lock held does not wait, it reads the rows as they are (the next
search tries again). A store Postgres has no rows of, rows pushed from another local index
and :meth:`PgIndex.rebuild` (``reindex --full``, which waits for the lock) build all of a
store's rows into new partitions swapped in at the end. A reader (``[index] writer =
false``) never writes. When Postgres cannot be reached, every call raises
:class:`memdir.errors.IndexUnavailable` (HTTP 503, a one-line CLI error); writes never need
Postgres (the files and the local index take them), so nothing acknowledged is lost.
The tables and the writing of a store's rows are :mod:`memdir.index.pgrows`.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from ..errors import IndexUnavailable, MissingExtra
from .pgrows import (
    BATCH,
    DOCS,
    OLD_TABLES,
    PASSAGES,
    PLAIN_TABLES,
    SCHEMA,
    TABLES,
    VERSION,
    PgSyncStats,
    StoreRows,
    tokens_of,
)
from .postings import K1, B

if TYPE_CHECKING:
    import psycopg

    from . import Index
    from .search import Filters

__all__ = ["DOCS", "PASSAGES", "PgIndex", "PgSyncStats", "tokens_of"]

_SECRET = re.compile(r"(password\s*=\s*)\S+|(://[^:/@\s]+:)[^@\s]+@", re.IGNORECASE)


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingExtra(
            'index.engine = "postgres" needs the postgres extra: pip install "memdir[postgres]"'
        ) from None
    return psycopg


def shown_dsn(dsn: str) -> str:
    """The DSN as an error shows it: without a password."""
    return _SECRET.sub(
        lambda m: (m.group(1) or m.group(2)) + "***" + ("@" if m.group(2) else ""), dsn
    )


# -- the tokens of a query -----------------------------------------------------------


def query_tokens(words: Sequence[str]) -> list[str]:
    """The tokens of a query's words, one entry per word FTS5 would score (duplicates kept).

    A word FTS5 splits into several tokens (``snake_case``) counts as each of them here,
    where FTS5 scores it as a phrase: the one place the two engines can differ.
    """
    found = tokens_of([(w,) for w in words])
    return [term for terms, _ in found for term in sorted(terms)]


# -- the engine -----------------------------------------------------------------------


BM25_CANDIDATES = 200  # the best rows a BM25 query filters first (at least 4 per hit asked)
EF_SEARCH_MAX = 1000  # the most candidates pgvector's HNSW search returns (hnsw.ef_search)


class PgIndex:
    """One store's rows in a Postgres index. Thread-safe: one connection per thread.

    ``writer`` False (``[index] writer = false``: a replica that only reads) never writes
    the store's rows and never compares them with its own index.
    """

    def __init__(
        self,
        dsn: str,
        store: str,
        *,
        timeout: float = 5.0,
        writer: bool = True,
        approximate_from: int = 0,
        approximate_candidates: int = 200,
    ) -> None:
        if not dsn:
            from ..errors import ConfigError

            raise ConfigError('index.engine = "postgres" needs index.dsn (or MEMDIR_INDEX_DSN)')
        self.dsn = dsn
        self.store = store
        self.timeout = timeout
        self.writer = writer
        self.approximate_from = approximate_from
        self.approximate_candidates = approximate_candidates
        # How this object's vector searches ranked: through the approximate index (each
        # round of candidates counted) or by an exact scan.
        self.vector_scans = {"approximate": 0, "exact": 0}
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()
        self._schema_ready = False
        # The local change log's (epoch, seq) last pushed, per vector model (None: no vectors).
        self._seen: dict[str | None, tuple[Any, ...]] = {}

    # -- connections ---------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> IndexUnavailable:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return IndexUnavailable(
            f"the Postgres index ({shown_dsn(self.dsn)}) cannot be reached: {first}; writes "
            "are kept in the files and the local index, and searches work again once it is back"
        )

    def _conn(self) -> psycopg.Connection[Any]:
        psycopg = _driver()
        conn = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed and not conn.broken:
            return conn  # type: ignore[no-any-return]
        try:
            conn = psycopg.connect(
                self.dsn, autocommit=True, connect_timeout=max(1, int(self.timeout))
            )
        except psycopg.Error as exc:
            raise self._unavailable(exc) from None
        self._local.conn = conn
        with self._lock:
            self._all.append(conn)
        if not self._schema_ready:
            self._ensure_schema(conn)
        return conn  # type: ignore[no-any-return]

    @contextmanager
    def _session(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection; a lost server becomes IndexUnavailable (and the connection is dropped)."""
        psycopg = _driver()
        conn = self._conn()
        try:
            yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            with suppress(Exception):
                conn.close()
            self._local.conn = None
            self._seen.clear()
            raise self._unavailable(exc) from None

    def _ensure_schema(self, conn: Any) -> None:
        psycopg = _driver()
        try:
            with conn.transaction():
                # One creator at a time: CREATE ... IF NOT EXISTS races with itself.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('memdir:schema'))")
                found = _schema_version(conn)
                if found is not None and int(found) > int(VERSION):
                    from ..errors import ConfigError

                    raise ConfigError(
                        f"the Postgres index ({shown_dsn(self.dsn)}) holds tables of layout "
                        f"{found}, made by a newer memdir; this one knows layout {VERSION}"
                    )
                if found != VERSION:
                    # Tables of another version hold only derived rows: drop them, and
                    # every store's next sync builds its rows again (memdir_stores is gone).
                    for table in (*TABLES, *OLD_TABLES, *PLAIN_TABLES):
                        conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
                    conn.execute(SCHEMA)
                    conn.execute(
                        "INSERT INTO memdir_meta (key, value) VALUES ('version', %s)", (VERSION,)
                    )
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from None
        self._schema_ready = True

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                with suppress(Exception):
                    conn.close()
            self._all.clear()
        self._local = threading.local()

    @contextmanager
    def _writer(self, conn: Any, *, wait: bool) -> Iterator[bool]:
        """A transaction holding the store's advisory lock; False when not waiting and held."""
        with conn.transaction():
            key = f"memdir:store:{self.store}"
            if wait:
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (key,))
                yield True
                return
            got = conn.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", (key,))
            row = got.fetchone()
            yield bool(row and row[0])

    # -- writing --------------------------------------------------------------------------

    def sync(self, local: Index, model: str | None, *, force: bool = False) -> PgSyncStats:
        """Bring this store's rows in step with the local index (its vectors of ``model``).

        The local change log (:mod:`memdir.index.pglog`) names the paths changed since the
        last push, which Postgres records per store: only those are written. A store
        Postgres has no rows of, rows pushed from another local index (another epoch) or
        vectors of another model are built afresh. Nothing is read from Postgres when the
        log has not moved since this object's last sync, and nothing at all by a reader
        (``writer`` False). ``model`` None (a keyword search) keeps the vectors of the
        model Postgres holds. A search does not wait for another writer (``skipped``).
        """
        if not self.writer:
            return PgSyncStats()
        state = self._state(local)
        if not force and self._seen.get(model) == state:
            return PgSyncStats()
        stats = self._write(local, model, wait=False, full=False)
        if not stats.skipped:
            self._seen[model] = self._state(local) if stats.full else state
        return stats

    def rebuild(self, local: Index, model: str | None) -> PgSyncStats:
        """Replace every row of this store with what the local index holds (waits for the lock)."""
        stats = self._write(local, model, wait=True, full=True)
        self._seen = {model: self._state(local)}
        return stats

    def _state(self, local: Index) -> tuple[str | None, int]:
        """Where the local change log stands (its epoch and last seq)."""
        from . import pglog

        try:
            return pglog.top(local.conn)
        except sqlite3.Error:
            return None, 0

    def _write(self, local: Index, model: str | None, *, wait: bool, full: bool) -> PgSyncStats:
        from . import pglog

        stats = PgSyncStats()
        lconn = local.conn
        epoch = pglog.top(lconn)[0]
        if epoch is None:
            with local.transaction() as tx:
                epoch = pglog.enable(tx)  # from now on every change is logged
        with self._session() as conn, self._writer(conn, wait=wait) as held:
            if not held:
                stats.skipped = True
                return stats
            row = conn.execute(
                "SELECT epoch, seq, model FROM memdir_stores WHERE store = %s", (self.store,)
            ).fetchone()
            _epoch, seq = pglog.top(lconn)  # read before the rows: a later change is pushed again
            if row is not None and model is None:
                model = row[2]  # a keyword search keeps the vectors Postgres has
            if (
                full
                or row is None
                or row[0] != epoch
                or int(row[1]) > seq
                or (model is not None and row[2] != model)
            ):
                StoreRows(self.store, approximate_from=self.approximate_from).build(
                    conn, lconn, model, stats
                )
            else:
                paths = pglog.since(lconn, int(row[1]))
                for lo in range(0, len(paths), BATCH):
                    StoreRows(self.store, approximate_from=self.approximate_from).push(
                        conn, lconn, paths[lo : lo + BATCH], model, stats
                    )
            conn.execute(
                "INSERT INTO memdir_stores (store, epoch, seq, model) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (store) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq, "
                "model = excluded.model",
                (self.store, epoch, seq, model),
            )
        return stats

    # -- reading --------------------------------------------------------------------------

    def count(self, kind: int = DOCS) -> int:
        with self._session() as conn:
            row = conn.execute(
                "SELECT count(*) FROM memdir_rows WHERE store = %s AND kind = %s",
                (self.store, kind),
            ).fetchone()
        return int(row[0]) if row else 0

    def has_passages(self) -> bool:
        """Whether the store has BM25 rows of passages (from the counts: no scan)."""
        with self._session() as conn:
            row = conn.execute(
                "SELECT n FROM memdir_counts WHERE store = %s AND kind = %s",
                (self.store, PASSAGES),
            ).fetchone()
        return bool(row and row[0] > 0)

    def bm25(
        self,
        words: Sequence[str],
        flt: Filters,
        limit: int,
        *,
        kind: int = DOCS,
        weights: tuple[float, float, float] = (3.0, 1.0, 0.0),
        offset: int = 0,
    ) -> list[tuple[str, float]]:
        """``(path, score)`` by FTS5's BM25 over the documents or the passages, best first."""
        terms = query_tokens(words)
        if not terms or limit < 1:
            return []
        condition, params = filter_sql(flt)
        sql = f"""
        WITH q AS (SELECT unnest(%s::text[]) AS term),
        st AS (SELECT n::float8 AS n,
                      CASE WHEN n > 0 THEN total::float8 / n ELSE 1 END AS avgdl
               FROM memdir_counts WHERE store = %s AND kind = %s),
        df AS (SELECT t.term, count(*)::float8 AS df FROM memdir_terms t
               WHERE t.store = %s AND t.kind = %s AND t.term = ANY(%s::text[]) GROUP BY t.term),
        idf AS (SELECT q.term, CASE WHEN ln((st.n - df.df + 0.5) / (df.df + 0.5)) > 0
                       THEN ln((st.n - df.df + 0.5) / (df.df + 0.5)) ELSE 1e-6 END AS idf
                FROM q JOIN df USING (term), st),
        scored AS (
            SELECT t.path, sum(idf.idf * (f.f * {K1 + 1!r}) /
                   (f.f + {K1!r} * ({1 - B!r} + {B!r} * t.dl / st.avgdl))) AS score
            FROM idf JOIN memdir_terms t ON t.store = %s AND t.kind = %s AND t.term = idf.term
            CROSS JOIN LATERAL (SELECT %s * t.tf1 + %s * t.tf2 + %s * t.tf3 AS f) f
            CROSS JOIN st
            GROUP BY t.path),
        best AS (SELECT path, score FROM scored ORDER BY score DESC, path LIMIT %s)
        """
        # The filters are checked on the best rows first, not on every row a term is in
        # (a common word's rows are most of the store): each comes back with whether it
        # passes. When enough pass, or these were all the rows, they are the answer (every
        # row left out scores lower); otherwise the filters are checked on every row.
        first = f"""{sql}
        SELECT s.path, s.score, coalesce(true{condition}, false) FROM best s
        LEFT JOIN memdir_docs d ON d.store = %s AND d.path = s.path
        ORDER BY s.score DESC, s.path
        """
        every = f"""{sql}
        SELECT s.path, s.score FROM best s
        JOIN memdir_docs d ON d.store = %s AND d.path = s.path
        WHERE true{condition}
        ORDER BY s.score DESC, s.path LIMIT %s OFFSET %s
        """
        args = [terms, self.store, kind, self.store, kind, terms, self.store, kind, *weights]
        wanted = limit + offset
        cap = max(4 * wanted, BM25_CANDIDATES)
        with self._session() as conn:
            rows = conn.execute(first, [*args, cap, *params, self.store]).fetchall()
            passed = [(p, s) for p, s, ok in rows if ok]
            if len(passed) < wanted and len(rows) >= cap:
                found = conn.execute(every, [*args, None, self.store, *params, limit, offset])
                return [(str(p), float(s)) for p, s in found.fetchall()]
        return [(str(p), float(s)) for p, s in passed[offset:wanted]]

    def nearest(
        self, qvec: Any, flt: Filters, limit: int
    ) -> list[tuple[str, float, int, int, int]]:
        """``(path, score, chunk_no, start, end)``: the best chunk of the nearest documents.

        A store with an approximate index (made once it had ``index.approximate_from``
        vectors; 0 here scans exactly whatever Postgres holds) is searched through it
        first; when the chunks it finds leave fewer than ``limit`` documents after the
        filters, with more candidates, and then exactly.
        """
        if limit < 1:
            return []
        condition, params = filter_sql(flt)
        qtext = _vector_text(qvec)
        with self._session() as conn:
            row = None
            if self.approximate_from > 0:
                row = conn.execute(
                    "SELECT dim FROM memdir_ann WHERE store = %s", (self.store,)
                ).fetchone()
            if row is not None and int(row[0]) == len(qvec):
                wanted = max(self.approximate_candidates, 4 * limit)
                while True:
                    found = self._approximate(conn, qtext, int(row[0]), condition, params,
                                              limit, min(wanted, EF_SEARCH_MAX))  # fmt: skip
                    self.vector_scans["approximate"] += 1
                    if len(found) >= limit:
                        return found
                    if wanted >= EF_SEARCH_MAX:
                        break
                    wanted *= 4
        self.vector_scans["exact"] += 1
        return self._exact(qtext, condition, params, limit)

    def _approximate(
        self,
        conn: Any,
        qtext: str,
        dim: int,
        condition: str,
        params: list[Any],
        limit: int,
        candidates: int,
    ) -> list[tuple[str, float, int, int, int]]:
        """The nearest documents among the ``candidates`` chunks the HNSW index finds."""
        sql = f"""
        WITH near AS MATERIALIZED (
            SELECT v.path, -(v.embedding::vector({dim}) <#> %s::vector({dim})) AS score,
                   v.chunk_no, v.start_at, v.end_at
            FROM memdir_vectors v WHERE v.store = %s
            ORDER BY v.embedding::vector({dim}) <#> %s::vector({dim}) LIMIT %s),
        best AS (
            SELECT DISTINCT ON (n.path) n.path, n.score, n.chunk_no, n.start_at, n.end_at
            FROM near n JOIN memdir_docs d ON d.store = %s AND d.path = n.path
            WHERE true{condition}
            ORDER BY n.path, n.score DESC, n.chunk_no)
        SELECT * FROM best ORDER BY score DESC, path LIMIT %s
        """
        args = [qtext, self.store, qtext, candidates, self.store, *params, limit]
        with conn.transaction():
            # The index returns at most ef_search rows: as many as the candidates asked.
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(candidates),))
            rows = conn.execute(sql, args).fetchall()
        return [(str(r[0]), float(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]

    def _exact(
        self, qtext: str, condition: str, params: list[Any], limit: int
    ) -> list[tuple[str, float, int, int, int]]:
        """The nearest documents by a scan of every chunk of the store.

        The scores are taken apart first (a materialized CTE): sorted with the rows, the
        vectors went with them, 1.5 KB a row at 384 dimensions, and the sort spilled to
        disk (250 ms at 31,000 chunks, where scoring them takes 30).
        """
        ranked = f"""
        WITH scored AS MATERIALIZED (
            SELECT v.path, -(v.embedding <#> %s::vector) AS score,
                   v.chunk_no, v.start_at, v.end_at
            FROM memdir_vectors v JOIN memdir_docs d ON d.store = v.store AND d.path = v.path
            WHERE v.store = %s{condition})
        SELECT * FROM (SELECT DISTINCT ON (path) * FROM scored
                       ORDER BY path, score DESC, chunk_no) best
        ORDER BY score DESC, path LIMIT %s
        """
        with self._session() as conn:
            rows = conn.execute(ranked, [qtext, self.store, *params, limit]).fetchall()
        return [(str(r[0]), float(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]


def filter_sql(flt: Filters, alias: str = "d") -> tuple[str, list[Any]]:
    """The filters as a Postgres condition (starting with AND) on ``memdir_docs``."""
    parts = [f"{alias}.zone = 0"]
    params: list[Any] = []
    if not flt.include_superseded:
        parts.append(f"{alias}.hidden = 0")
    if flt.path_prefix:
        prefix = flt.path_prefix.lstrip("/")
        parts.append(f"left({alias}.path, %s) = %s")
        params += [len(prefix), prefix]
    for gone in flt.exclude:
        if gone.endswith("/"):
            parts.append(f"left({alias}.path, %s) <> %s")
            params += [len(gone), gone]
        else:
            parts.append(f"{alias}.path <> %s")
            params.append(gone)
    if flt.kind:
        parts.append(f"lower({alias}.memory_kind) = lower(%s)")
        params.append(flt.kind)
    if flt.type:
        parts.append(f"lower({alias}.type) = lower(%s)")
        params.append(flt.type)
    for key, value in flt.where:
        # A scalar, or any scalar item of a list, equal to the value (JSON null for None).
        parts.append(
            f"(({alias}.fm -> %s) = %s::jsonb OR (jsonb_typeof({alias}.fm -> %s) = 'array' "
            f"AND ({alias}.fm -> %s) @> jsonb_build_array(%s::jsonb)))"
        )
        val = json.dumps(value)
        params += [key, val, key, key, val]
    return " AND " + " AND ".join(parts), params


def _schema_version(conn: Any) -> str | None:
    """The version of memdir's tables in this database (None: none, or of version 1)."""
    if conn.execute("SELECT to_regclass('memdir_meta')").fetchone()[0] is None:
        return None
    row = conn.execute("SELECT value FROM memdir_meta WHERE key = 'version'").fetchone()
    return None if row is None else str(row[0])


def _vector_text(vec: Any) -> str:
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"
