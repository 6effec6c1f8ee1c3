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
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import IndexUnavailable, MissingExtra
from .postings import K1, TOKENIZE, B

if TYPE_CHECKING:
    import psycopg

    from . import Index
    from .search import Filters

__all__ = ["PgIndex", "PgSyncStats", "tokens_of"]

DOCS, PASSAGES = 0, 1  # the two BM25 tables, as the `kind` column names them
BATCH = 2000  # rows tokenized and written per round of an incremental sync
VERSION = "2"  # of the tables below; a database with another is emptied and made again

# Every table but memdir_stores is partitioned by store: a full build fills a new table
# of its own, builds its indexes once at the end and swaps it in for the old one.
SCHEMA = """
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS memdir_meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS memdir_stores (
    store text PRIMARY KEY, epoch text NOT NULL, seq bigint NOT NULL, model text);
CREATE TABLE IF NOT EXISTS memdir_counts (
    store text NOT NULL, kind smallint NOT NULL, n bigint NOT NULL, total bigint NOT NULL,
    PRIMARY KEY (store, kind));
CREATE TABLE IF NOT EXISTS memdir_docs (
    store text NOT NULL, path text NOT NULL,
    zone int NOT NULL, hidden int NOT NULL, memory_kind text, type text,
    thread text, "user" text, created text, fm jsonb,
    PRIMARY KEY (store, path)) PARTITION BY LIST (store);
CREATE TABLE IF NOT EXISTS memdir_rows (
    store text NOT NULL, kind smallint NOT NULL, path text NOT NULL, dl int NOT NULL,
    PRIMARY KEY (store, kind, path)) PARTITION BY LIST (store);
CREATE TABLE IF NOT EXISTS memdir_terms (
    store text NOT NULL, kind smallint NOT NULL, term text NOT NULL, path text NOT NULL,
    tf1 real NOT NULL, tf2 real NOT NULL, tf3 real NOT NULL) PARTITION BY LIST (store);
CREATE INDEX IF NOT EXISTS memdir_terms_term ON memdir_terms (kind, term);
CREATE INDEX IF NOT EXISTS memdir_terms_path ON memdir_terms (path);
CREATE TABLE IF NOT EXISTS memdir_vectors (
    store text NOT NULL, path text NOT NULL, chunk_no int NOT NULL,
    start_at int NOT NULL, end_at int NOT NULL, model text NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (store, path, chunk_no)) PARTITION BY LIST (store);
"""
# The partitioned tables, and the indexes a new partition of each is given before it is
# attached (matching the parent's, so attaching builds nothing).
TABLES = {
    "memdir_docs": ("PRIMARY KEY (store, path)",),
    "memdir_rows": ("PRIMARY KEY (store, kind, path)",),
    "memdir_terms": ("(kind, term)", "(path)"),  # no key: one row per kind, term, path
    "memdir_vectors": ("PRIMARY KEY (store, path, chunk_no)",),
}
# Per store: what was pushed (memdir_stores), and the number of BM25 rows of each kind and
# their total length, which BM25 needs for every query (memdir_counts).
PLAIN_TABLES = ("memdir_stores", "memdir_counts", "memdir_meta")
OLD_TABLES = ("memdir_vector_sigs",)  # of version 1, dropped with the rest
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


@dataclass
class PgSyncStats:
    docs: int = 0
    passages: int = 0
    vectors: int = 0
    removed: int = 0
    full: bool = False  # the store's rows were built afresh (not only the changed paths)
    skipped: bool = False  # another writer held the store's lock: read as it was

    @property
    def changed(self) -> int:
        return self.docs + self.passages + self.vectors + self.removed


class PgIndex:
    """One store's rows in a Postgres index. Thread-safe: one connection per thread.

    ``writer`` False (``[index] writer = false``: a replica that only reads) never writes
    the store's rows and never compares them with its own index.
    """

    def __init__(self, dsn: str, store: str, *, timeout: float = 5.0, writer: bool = True) -> None:
        if not dsn:
            from ..errors import ConfigError

            raise ConfigError('index.engine = "postgres" needs index.dsn (or MEMDIR_INDEX_DSN)')
        self.dsn = dsn
        self.store = store
        self.timeout = timeout
        self.writer = writer
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
                self._build(conn, lconn, model, stats)
            else:
                paths = pglog.since(lconn, int(row[1]))
                for lo in range(0, len(paths), BATCH):
                    self._push(conn, lconn, paths[lo : lo + BATCH], model, stats)
            conn.execute(
                "INSERT INTO memdir_stores (store, epoch, seq, model) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (store) DO UPDATE SET epoch = excluded.epoch, seq = excluded.seq, "
                "model = excluded.model",
                (self.store, epoch, seq, model),
            )
        return stats

    # -- a full build: new partitions, swapped in at the end

    def _build(
        self, conn: Any, lconn: sqlite3.Connection, model: str | None, stats: PgSyncStats
    ) -> None:
        """Write every row of the store into new tables and swap them in for the old ones.

        Each new table gets its indexes after it is filled (one sort each, several times
        faster than keeping them up to date row by row) and a check on the store key, so
        attaching it to its parent neither scans it nor builds anything. Readers see the
        old rows until the commit; the swap at the end holds each parent's lock for
        moments only.
        """
        stats.full = True
        conn.execute("SET LOCAL maintenance_work_mem = '256MB'")
        suffix = secrets.token_hex(4)
        made = {table: self._new_part(conn, table, suffix) for table in TABLES}
        with conn.cursor().copy(
            f"COPY {made['memdir_docs']} (store, path, zone, hidden, memory_kind, type, "
            'thread, "user", created, fm) FROM STDIN'
        ) as copy:
            for v in lconn.execute(_DOC_ROWS):
                copy.write_row((self.store, v[0], int(v[1] or 0), int(v[2] or 0), *v[3:8],
                                _json(v[8])))  # fmt: skip
                stats.docs += 1
        counts = {DOCS: self._build_rows(conn, lconn, made, DOCS)}
        if _has_passages(lconn):
            counts[PASSAGES] = self._build_rows(conn, lconn, made, PASSAGES)
            stats.passages = counts[PASSAGES][0]
        conn.execute("DELETE FROM memdir_counts WHERE store = %s", (self.store,))
        for kind, (n, total) in counts.items():
            conn.execute(
                "INSERT INTO memdir_counts (store, kind, n, total) VALUES (%s, %s, %s, %s)",
                (self.store, kind, n, total),
            )
        if model is not None and _has_table(lconn, "chunks"):
            with conn.cursor().copy(
                f"COPY {made['memdir_vectors']} (store, path, chunk_no, start_at, end_at, "
                "model, embedding) FROM STDIN"
            ) as copy:
                for path, chunk_no, start, end, vec in lconn.execute(_VECTOR_ROWS, (model,)):
                    copy.write_row((self.store, path, chunk_no, start, end, model, _vector(vec)))
                    stats.vectors += 1
        for table, new in made.items():
            for index in TABLES[table]:
                if index.startswith("PRIMARY KEY"):
                    conn.execute(f"ALTER TABLE {new} ADD {index}")
                else:
                    conn.execute(f"CREATE INDEX ON {new} {index}")
        for table, new in made.items():
            for old in self._parts(conn, table):
                if old != new:
                    conn.execute(f"DROP TABLE {old}")
            conn.execute(
                _sql(f"ALTER TABLE {table} ATTACH PARTITION {new} FOR VALUES IN ({{}})", self.store)
            )
            conn.execute(f"ANALYZE {new}")

    def _part_prefix(self, table: str) -> str:
        key = hashlib.blake2b(self.store.encode("utf-8", "surrogatepass"), digest_size=16)
        return f"{table}_{key.hexdigest()}_"

    def _new_part(self, conn: Any, table: str, suffix: str) -> str:
        name = self._part_prefix(table) + suffix
        conn.execute(f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS)")
        conn.execute(_sql(f"ALTER TABLE {name} ADD CHECK (store = {{}})", self.store))
        return name

    def _parts(self, conn: Any, table: str) -> list[str]:
        """The partitions of ``table`` that hold this store (one, or none yet), by their bound."""
        rows = conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass AND pg_get_expr(c.relpartbound, c.oid) = "
            "'FOR VALUES IN (' || quote_literal(%s) || ')'",
            (table, self.store),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def _build_rows(
        self,
        conn: Any,
        lconn: sqlite3.Connection,
        made: dict[str, str],
        kind: int,
    ) -> tuple[int, int]:
        """Every BM25 row of one kind, with its terms read from the local FTS5 index itself.

        The tokens are those FTS5 stored (``fts5vocab``), counted per row, term and column
        by SQLite, and written as lines of COPY text (a profile of 10,000 documents: 6.1 s
        with the lines made by SQLite's printf and group_concat, 3.0 s here). Rows without
        a token get their row (length 0), as FTS5 counts them. Returns the number of rows
        and their total length.
        """
        fts = "docs_fts" if kind == DOCS else "passages_fts"
        cols = ("title", "body") if kind == DOCS else ("title", "body", "context")
        vocab = f"memdir_pg_{fts}_vocab"
        lconn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING "
                      f"fts5vocab(main, '{fts}', 'instance')")  # fmt: skip
        # unicode61 without tokenchars makes no token holding what COPY text escapes.
        term = "term" if "tokenchars" not in TOKENIZE else _escaped("term")
        sums = ", ".join(f"sum(col = '{c}')" for c in cols) + ", 0" * (3 - len(cols))
        counted = f"SELECT {term}, doc, {sums} FROM temp.{vocab} GROUP BY term, doc"
        paths = {
            int(doc_id): str(path)
            for doc_id, path in lconn.execute(
                f"SELECT d.id, d.path FROM {fts} f JOIN docs d ON d.id = f.rowid"
            )
        }
        # What each line holds around its term: the store and kind before, the path after.
        head = f"{_copy_text(self.store)}\t{kind}\t"
        tails = {doc_id: f"\t{_copy_text(path)}\t" for doc_id, path in paths.items()}
        lengths = dict.fromkeys(paths, 0)
        cur = lconn.cursor()
        cur.row_factory = None
        cur.execute(counted)
        with conn.cursor().copy(
            f"COPY {made['memdir_terms']} (store, kind, term, path, tf1, tf2, tf3) FROM STDIN"
        ) as copy:
            while part := cur.fetchmany(20_000):
                part = [row for row in part if row[1] in tails]  # a row of a document
                copy.write(
                    "".join([f"{head}{t}{tails[d]}{a}\t{b}\t{c}\n" for t, d, a, b, c in part])
                )
                for _t, d, a, b, c in part:
                    lengths[d] += a + b + c
        with conn.cursor().copy(
            f"COPY {made['memdir_rows']} (store, kind, path, dl) FROM STDIN"
        ) as copy:
            for doc_id, path in paths.items():
                copy.write_row((self.store, kind, path, lengths[doc_id]))
        return len(paths), sum(lengths.values())

    # -- an incremental sync: the changed paths only

    def _push(
        self,
        conn: Any,
        lconn: sqlite3.Connection,
        paths: list[str],
        model: str | None,
        stats: PgSyncStats,
    ) -> None:
        """Delete these paths' rows and write them again from the local index."""
        marks = ",".join("?" * len(paths))
        before = conn.execute(
            "SELECT kind, count(*), coalesce(sum(dl), 0) FROM memdir_rows "
            "WHERE store = %s AND path = ANY(%s) GROUP BY kind",
            (self.store, paths),
        ).fetchall()
        delta = {int(kind): (-int(n), -int(total)) for kind, n, total in before}
        for table in TABLES:
            if table == "memdir_vectors" and model is None:
                continue
            conn.execute(
                f"DELETE FROM {table} WHERE store = %s AND path = ANY(%s)", (self.store, paths)
            )
        docs = lconn.execute(_DOC_ROWS + f" WHERE path IN ({marks})", paths).fetchall()
        stats.removed += len(paths) - len(docs)
        with conn.cursor().copy(
            "COPY memdir_docs (store, path, zone, hidden, memory_kind, type, thread, "
            '"user", created, fm) FROM STDIN'
        ) as copy:
            for v in docs:
                copy.write_row((self.store, v[0], int(v[1] or 0), int(v[2] or 0), *v[3:8],
                                _json(v[8])))  # fmt: skip
        stats.docs += len(docs)
        kinds = [DOCS, PASSAGES] if _has_passages(lconn) else [DOCS]
        for kind in kinds:
            n, total = self._push_rows(conn, lconn, kind, paths)
            gone_n, gone_total = delta.get(kind, (0, 0))
            delta[kind] = (gone_n + n, gone_total + total)
            if kind == PASSAGES:
                stats.passages += n
        for kind, (n, total) in delta.items():
            conn.execute(
                "INSERT INTO memdir_counts AS c (store, kind, n, total) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (store, kind) DO UPDATE SET n = c.n + excluded.n, "
                "total = c.total + excluded.total",
                (self.store, kind, n, total),
            )
        if model is not None and _has_table(lconn, "chunks"):
            found = lconn.execute(_VECTOR_ROWS + f" AND d.path IN ({marks})", (model, *paths))
            with conn.cursor().copy(
                "COPY memdir_vectors (store, path, chunk_no, start_at, end_at, model, embedding) "
                "FROM STDIN"
            ) as copy:
                for path, chunk_no, start, end, vec in found:
                    copy.write_row((self.store, path, chunk_no, start, end, model, _vector(vec)))
                    stats.vectors += 1

    def _push_rows(
        self, conn: Any, lconn: sqlite3.Connection, kind: int, paths: list[str]
    ) -> tuple[int, int]:
        """The BM25 rows of these paths (tokenized here, as FTS5 tokenizes them): their
        number and total length."""
        marks = ",".join("?" * len(paths))
        if kind == DOCS:
            select = "SELECT d.path, f.title, f.body, '' FROM docs_fts f "
        else:
            select = "SELECT d.path, f.title, f.body, f.context FROM passages_fts f "
        select += f"JOIN docs d ON d.id = f.rowid WHERE d.path IN ({marks})"
        rows = lconn.execute(select, paths).fetchall()
        counted = tokens_of([[str(t or "") for t in text] for _, *text in rows])
        cur = conn.cursor()
        with cur.copy("COPY memdir_rows (store, kind, path, dl) FROM STDIN") as copy:
            for (path, *_), (_, length) in zip(rows, counted, strict=True):
                copy.write_row((self.store, kind, path, length))
        with cur.copy(
            "COPY memdir_terms (store, kind, term, path, tf1, tf2, tf3) FROM STDIN"
        ) as copy:
            for (path, *_), (terms, _) in zip(rows, counted, strict=True):
                for term, tf in terms.items():
                    copy.write_row((self.store, kind, term, path, *tf))
        return len(rows), sum(length for _, length in counted)

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


_DOC_ROWS = "SELECT path, zone, hidden, memory_kind, type, thread, user, created, fm FROM docs"
_VECTOR_ROWS = (
    "SELECT d.path, c.chunk_no, c.start, c.end, v.vec FROM chunks c "
    "JOIN docs d ON d.id = c.doc_id JOIN vectors v ON v.model = ? AND v.text_hash = c.text_hash"
)


def _schema_version(conn: Any) -> str | None:
    """The version of memdir's tables in this database (None: none, or of version 1)."""
    if conn.execute("SELECT to_regclass('memdir_meta')").fetchone()[0] is None:
        return None
    row = conn.execute("SELECT value FROM memdir_meta WHERE key = 'version'").fetchone()
    return None if row is None else str(row[0])


def _sql(template: str, value: str) -> Any:
    """A statement with a string literal where ``{}`` stands (DDL takes no parameters)."""
    from psycopg import sql

    return sql.SQL(template).format(sql.Literal(value))


def _copy_text(value: str) -> str:
    """A value as COPY's text format writes it (backslash, tab, newline, CR escaped)."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
        .replace("\r", "\\r")
    )  # fmt: skip


def _escaped(column: str) -> str:
    """SQLite's expression for a column as COPY's text format writes it."""
    out = f"replace({column}, '\\', '\\\\')"
    for code, letter in ((9, "t"), (10, "n"), (13, "r")):
        out = f"replace({out}, char({code}), '\\{letter}')"
    return out


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

    # As _vector_text writes it (repr of each float), without a numpy scalar per number.
    return "[" + ",".join(map(repr, np.frombuffer(blob, dtype=np.float32).tolist())) + "]"


def _vector_text(vec: Any) -> str:
    return "[" + ",".join(repr(float(x)) for x in vec) + "]"


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return found is not None


def _has_passages(conn: sqlite3.Connection) -> bool:
    return _has_table(conn, "passages_fts")
