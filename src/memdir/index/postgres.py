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

:meth:`PgIndex.sync` brings the rows of a store in step with the local index: it compares a
signature per document, per passage and per document's vectors and writes only those that
differ, in one transaction under the store's advisory lock, so one writer at a time changes
a store; a search that finds the lock held does not wait, it reads the rows as they are
(the next search tries again). :meth:`PgIndex.rebuild` (``reindex --full``) replaces all of
a store's rows, waiting for the lock. When Postgres cannot be reached, every call raises
:class:`memdir.errors.IndexUnavailable` (HTTP 503, a one-line CLI error); writes never need
Postgres (the files and the local index take them), so nothing acknowledged is lost.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from ..errors import IndexUnavailable, MissingExtra
from ..records import recordclass
from .postings import K1, TOKENIZE, B

if TYPE_CHECKING:
    import psycopg

    from . import Index
    from .search import Filters

__all__ = ["PgIndex", "PgSyncStats", "tokens_of"]

DOCS, PASSAGES = 0, 1  # the two BM25 tables, as the `kind` column names them
BATCH = 2000  # rows tokenized and written per round

SCHEMA = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS memdir_docs (
    store text NOT NULL, path text NOT NULL, sig text NOT NULL,
    zone int NOT NULL, hidden int NOT NULL, memory_kind text, type text,
    thread text, "user" text, created text, fm jsonb,
    PRIMARY KEY (store, path));
CREATE TABLE IF NOT EXISTS memdir_rows (
    store text NOT NULL, kind smallint NOT NULL, path text NOT NULL, sig text NOT NULL,
    dl int NOT NULL,
    PRIMARY KEY (store, kind, path));
CREATE TABLE IF NOT EXISTS memdir_terms (
    store text NOT NULL, kind smallint NOT NULL, term text NOT NULL, path text NOT NULL,
    tf1 real NOT NULL, tf2 real NOT NULL, tf3 real NOT NULL,
    PRIMARY KEY (store, kind, term, path));
CREATE INDEX IF NOT EXISTS memdir_terms_path ON memdir_terms (store, kind, path);
CREATE TABLE IF NOT EXISTS memdir_vectors (
    store text NOT NULL, path text NOT NULL, chunk_no int NOT NULL,
    start_at int NOT NULL, end_at int NOT NULL, model text NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (store, path, chunk_no));
CREATE TABLE IF NOT EXISTS memdir_vector_sigs (
    store text NOT NULL, path text NOT NULL, sig text NOT NULL,
    PRIMARY KEY (store, path));
"""
TABLES = ("memdir_docs", "memdir_rows", "memdir_terms", "memdir_vectors", "memdir_vector_sigs")
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


# -- FTS5's tokens --------------------------------------------------------------------


_tok = threading.local()


def _tokenizer() -> sqlite3.Connection:
    conn: sqlite3.Connection | None = getattr(_tok, "conn", None)
    if conn is None:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(a, b, c, tokenize = '{TOKENIZE}')")
        conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        _tok.conn = conn
    return conn


def tokens_of(rows: Sequence[Sequence[str]]) -> list[tuple[dict[str, list[int]], int]]:
    """Each row's tokens as FTS5 makes them: ``term -> [count per column]``, and its length.

    Rows hold up to three columns of text; the tokenizer is the index's own.
    """
    conn = _tokenizer()
    out: list[tuple[dict[str, list[int]], int]] = [({}, 0) for _ in rows]
    with conn:
        conn.executemany(
            "INSERT INTO t(rowid, a, b, c) VALUES (?, ?, ?, ?)",
            [(i, *(list(r) + ["", "", ""])[:3]) for i, r in enumerate(rows)],
        )
        column = {"a": 0, "b": 1, "c": 2}
        for doc, term, col, count in conn.execute(
            "SELECT doc, term, col, count(*) FROM v GROUP BY doc, term, col"
        ):
            terms, length = out[doc]
            counts = terms.setdefault(term, [0, 0, 0])
            counts[column[col]] += count
            out[doc] = (terms, length + count)
        conn.execute("DELETE FROM t")
    return out


def query_tokens(words: Sequence[str]) -> list[str]:
    """The tokens of a query's words, one entry per word FTS5 would score (duplicates kept).

    A word FTS5 splits into several tokens (``snake_case``) counts as each of them here,
    where FTS5 scores it as a phrase: the one place the two engines can differ.
    """
    found = tokens_of([(w,) for w in words])
    return [term for terms, _ in found for term in sorted(terms)]


# -- the engine -----------------------------------------------------------------------


@recordclass
class PgSyncStats:
    docs: int = 0
    passages: int = 0
    vectors: int = 0
    removed: int = 0
    skipped: bool = False  # another writer held the store's lock: read as it was

    @property
    def changed(self) -> int:
        return self.docs + self.passages + self.vectors + self.removed


class PgIndex:
    """One store's rows in a Postgres index. Thread-safe: one connection per thread."""

    def __init__(self, dsn: str, store: str, *, timeout: float = 5.0) -> None:
        if not dsn:
            from ..errors import ConfigError

            raise ConfigError('index.engine = "postgres" needs index.dsn (or MEMDIR_INDEX_DSN)')
        self.dsn = dsn
        self.store = store
        self.timeout = timeout
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()
        self._schema_ready = False
        # The local index's state last mirrored, per vector model (None: no vectors synced).
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
                conn.execute(SCHEMA)
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

    def _state(self, local: Index) -> tuple[Any, ...]:
        """What changes whenever the local index changes what Postgres mirrors.

        Its generation (every change of a document row) and the top of its chunk log
        (every change of the vectors and passages); a cache the local index writes for
        itself (postings of common words) changes neither.
        """
        from .vectorrows import chunk_log_top

        try:
            chunks: Any = chunk_log_top(local.conn)
        except sqlite3.Error:
            chunks = None
        return (local.generation, chunks)

    def sync(self, local: Index, model: str | None, *, force: bool = False) -> PgSyncStats:
        """Bring this store's rows in step with the local index (its vectors of ``model``).

        Skipped when the local index has not changed since the last sync of this object;
        ``model`` None (a keyword search) leaves the vectors as they are.
        A search does not wait for another writer (``skipped`` then says so).
        """
        state = self._state(local)
        if not force and self._seen.get(model) == state:
            return PgSyncStats()
        stats = self._write(local, model, wait=False, full=False)
        if not stats.skipped:
            self._seen[model] = state
        return stats

    def rebuild(self, local: Index, model: str | None) -> PgSyncStats:
        """Replace every row of this store with what the local index holds (waits for the lock)."""
        stats = self._write(local, model, wait=True, full=True)
        self._seen = {model: self._state(local)}
        return stats

    def _write(self, local: Index, model: str | None, *, wait: bool, full: bool) -> PgSyncStats:
        stats = PgSyncStats()
        lconn = local.conn
        with self._session() as conn, self._writer(conn, wait=wait) as held:
            if not held:
                stats.skipped = True
                return stats
            if full:
                for table in TABLES:
                    conn.execute(f"DELETE FROM {table} WHERE store = %s", (self.store,))
            self._sync_docs(conn, lconn, stats)
            self._sync_rows(conn, lconn, DOCS, stats)
            if _has_passages(lconn):
                self._sync_rows(conn, lconn, PASSAGES, stats)
            if model is not None:  # a keyword search leaves the vectors as they are
                self._sync_vectors(conn, lconn, model, stats)
        return stats

    def _remote(self, conn: Any, sql: str, *args: Any) -> dict[str, str]:
        return {str(p): str(s) for p, s in conn.execute(sql, (self.store, *args)).fetchall()}

    def _sync_docs(self, conn: Any, lconn: sqlite3.Connection, stats: PgSyncStats) -> None:
        rows = {}
        for r in lconn.execute(
            "SELECT path, hash, zone, hidden, memory_kind, type, thread, user, created, fm "
            "FROM docs"
        ):
            values = tuple(r)
            rows[str(values[0])] = (_sig(values[1:]), values)
        there = self._remote(conn, "SELECT path, sig FROM memdir_docs WHERE store = %s")
        gone = [p for p in there if p not in rows]
        todo = [v for p, (sig, v) in rows.items() if there.get(p) != sig]
        if gone:
            conn.execute(
                "DELETE FROM memdir_docs WHERE store = %s AND path = ANY(%s)", (self.store, gone)
            )
            stats.removed += len(gone)
        for lo in range(0, len(todo), BATCH):
            part = todo[lo : lo + BATCH]
            conn.execute(
                "DELETE FROM memdir_docs WHERE store = %s AND path = ANY(%s)",
                (self.store, [v[0] for v in part]),
            )
            with conn.cursor().copy(
                "COPY memdir_docs (store, path, sig, zone, hidden, memory_kind, type, thread, "
                '"user", created, fm) FROM STDIN'
            ) as copy:
                for v in part:
                    copy.write_row(
                        (self.store, v[0], _sig(v[1:]), int(v[2] or 0), int(v[3] or 0), *v[4:9],
                         _json(v[9]))
                    )  # fmt: skip
            stats.docs += len(part)

    def _sync_rows(
        self, conn: Any, lconn: sqlite3.Connection, kind: int, stats: PgSyncStats
    ) -> None:
        """The BM25 rows of the documents (``docs_fts``) or the passages (``passages_fts``)."""
        if kind == DOCS:
            select = (
                "SELECT d.path, f.title, f.body, '' FROM docs_fts f JOIN docs d ON d.id = f.rowid"
            )
        else:
            select = (
                "SELECT d.path, p.title, p.body, p.context FROM passages_fts p "
                "JOIN docs d ON d.id = p.rowid"
            )
        rows = {}
        for path, *text in lconn.execute(select):
            rows[str(path)] = (_sig(text), text)
        there = self._remote(
            conn, "SELECT path, sig FROM memdir_rows WHERE store = %s AND kind = %s", kind
        )
        gone = [p for p in there if p not in rows]
        todo = [(p, sig, text) for p, (sig, text) in rows.items() if there.get(p) != sig]
        self._drop_rows(conn, kind, gone)
        stats.removed += len(gone)
        for lo in range(0, len(todo), BATCH):
            part = todo[lo : lo + BATCH]
            self._drop_rows(conn, kind, [p for p, _, _ in part])
            counted = tokens_of([[str(t or "") for t in text] for _, _, text in part])
            cur = conn.cursor()
            with cur.copy("COPY memdir_rows (store, kind, path, sig, dl) FROM STDIN") as copy:
                for (path, sig, _), (_, length) in zip(part, counted, strict=True):
                    copy.write_row((self.store, kind, path, sig, length))
            with cur.copy(
                "COPY memdir_terms (store, kind, term, path, tf1, tf2, tf3) FROM STDIN"
            ) as copy:
                for (path, _, _), (terms, _) in zip(part, counted, strict=True):
                    for term, tf in terms.items():
                        copy.write_row((self.store, kind, term, path, *tf))
            if kind == DOCS:
                stats.docs += 0  # counted by the document rows
            else:
                stats.passages += len(part)

    def _drop_rows(self, conn: Any, kind: int, paths: list[str]) -> None:
        if not paths:
            return
        for table in ("memdir_rows", "memdir_terms"):
            conn.execute(
                f"DELETE FROM {table} WHERE store = %s AND kind = %s AND path = ANY(%s)",
                (self.store, kind, paths),
            )

    def _sync_vectors(
        self, conn: Any, lconn: sqlite3.Connection, model: str | None, stats: PgSyncStats
    ) -> None:
        local: dict[str, list[str]] = {}
        if model is not None and _has_table(lconn, "chunks"):
            for path, text_hash in lconn.execute(
                "SELECT d.path, c.text_hash FROM chunks c JOIN docs d ON d.id = c.doc_id "
                "JOIN vectors v ON v.model = ? AND v.text_hash = c.text_hash "
                "ORDER BY c.doc_id, c.chunk_no",
                (model,),
            ):
                local.setdefault(str(path), []).append(str(text_hash))
        sigs = {path: _sig([model, *hashes]) for path, hashes in local.items()}
        there = self._remote(conn, "SELECT path, sig FROM memdir_vector_sigs WHERE store = %s")
        gone = [p for p in there if p not in sigs]
        todo = [p for p, sig in sigs.items() if there.get(p) != sig]
        self._drop_vectors(conn, gone)
        stats.removed += len(gone)
        for lo in range(0, len(todo), BATCH):
            part = todo[lo : lo + BATCH]
            self._drop_vectors(conn, part)
            marks = ",".join("?" * len(part))
            found = lconn.execute(
                "SELECT d.path, c.chunk_no, c.start, c.end, v.vec FROM chunks c "
                "JOIN docs d ON d.id = c.doc_id "
                "JOIN vectors v ON v.model = ? AND v.text_hash = c.text_hash "
                f"WHERE d.path IN ({marks})",
                (model, *part),
            )
            cur = conn.cursor()
            with cur.copy(
                "COPY memdir_vectors (store, path, chunk_no, start_at, end_at, model, embedding) "
                "FROM STDIN"
            ) as copy:
                for path, chunk_no, start, end, vec in found:
                    copy.write_row((self.store, path, chunk_no, start, end, model, _vector(vec)))
            with cur.copy("COPY memdir_vector_sigs (store, path, sig) FROM STDIN") as copy:
                for path in part:
                    copy.write_row((self.store, path, sigs[path]))
            stats.vectors += len(part)

    def _drop_vectors(self, conn: Any, paths: list[str]) -> None:
        if not paths:
            return
        for table in ("memdir_vectors", "memdir_vector_sigs"):
            conn.execute(
                f"DELETE FROM {table} WHERE store = %s AND path = ANY(%s)",
                (self.store, paths),
            )

    # -- reading --------------------------------------------------------------------------

    def count(self, kind: int = DOCS) -> int:
        with self._session() as conn:
            row = conn.execute(
                "SELECT count(*) FROM memdir_rows WHERE store = %s AND kind = %s",
                (self.store, kind),
            ).fetchone()
        return int(row[0]) if row else 0

    def has_passages(self) -> bool:
        return self.count(PASSAGES) > 0

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
        st AS (SELECT count(*)::float8 AS n, coalesce(avg(dl), 1)::float8 AS avgdl
               FROM memdir_rows WHERE store = %s AND kind = %s),
        df AS (SELECT t.term, count(*)::float8 AS df FROM memdir_terms t
               WHERE t.store = %s AND t.kind = %s AND t.term = ANY(%s::text[]) GROUP BY t.term),
        idf AS (SELECT q.term, CASE WHEN ln((st.n - df.df + 0.5) / (df.df + 0.5)) > 0
                       THEN ln((st.n - df.df + 0.5) / (df.df + 0.5)) ELSE 1e-6 END AS idf
                FROM q JOIN df USING (term), st),
        scored AS (
            SELECT t.path, sum(idf.idf * (f.f * {K1 + 1!r}) /
                   (f.f + {K1!r} * ({1 - B!r} + {B!r} * r.dl / st.avgdl))) AS score
            FROM idf JOIN memdir_terms t ON t.store = %s AND t.kind = %s AND t.term = idf.term
            CROSS JOIN LATERAL (SELECT %s * t.tf1 + %s * t.tf2 + %s * t.tf3 AS f) f
            JOIN memdir_rows r ON r.store = t.store AND r.kind = t.kind AND r.path = t.path
            CROSS JOIN st
            GROUP BY t.path)
        SELECT s.path, s.score FROM scored s
        JOIN memdir_docs d ON d.store = %s AND d.path = s.path
        WHERE true{condition}
        ORDER BY s.score DESC, s.path LIMIT %s OFFSET %s
        """
        args = [terms, self.store, kind, self.store, kind, terms, self.store, kind, *weights]
        args += [self.store, *params, limit, offset]
        with self._session() as conn:
            rows = conn.execute(sql, args).fetchall()
        return [(str(p), float(s)) for p, s in rows]

    def nearest(
        self, qvec: Any, flt: Filters, limit: int
    ) -> list[tuple[str, float, int, int, int]]:
        """``(path, score, chunk_no, start, end)``: the best chunk of the nearest documents."""
        if limit < 1:
            return []
        condition, params = filter_sql(flt)
        sql = f"""
        SELECT DISTINCT ON (v.path) v.path, -(v.embedding <#> %s::vector) AS score,
               v.chunk_no, v.start_at, v.end_at
        FROM memdir_vectors v JOIN memdir_docs d ON d.store = v.store AND d.path = v.path
        WHERE v.store = %s{condition}
        ORDER BY v.path, score DESC, v.chunk_no
        """
        ranked = f"SELECT * FROM ({sql}) best ORDER BY score DESC, path LIMIT %s"
        with self._session() as conn:
            rows = conn.execute(ranked, [_vector_text(qvec), self.store, *params, limit]).fetchall()
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


def _sig(values: Sequence[Any]) -> str:
    return hashlib.blake2b(
        json.dumps(list(values), default=str).encode("utf-8", "surrogatepass"), digest_size=12
    ).hexdigest()


def _json(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    try:
        json.loads(text)
    except ValueError:
        return json.dumps(text)
    return text.replace("\\u0000", "")  # Postgres jsonb refuses NUL characters


def _vector(blob: bytes) -> str:
    import numpy as np

    return _vector_text(np.frombuffer(blob, dtype=np.float32))


def _vector_text(vec: Any) -> str:
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return found is not None


def _has_passages(conn: sqlite3.Connection) -> bool:
    return _has_table(conn, "passages_fts")
