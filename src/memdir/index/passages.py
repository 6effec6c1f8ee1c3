"""The lexical side of hybrid search: what each document says, and its thread around it.

Derived and rebuildable like the rest of the index, and filled by the vector sync
(:mod:`memdir.vectors.index`) in the same transactions: ``passages_fts(title, body,
context)`` holds what each document says and, for a document in a thread, what the
previous document of the thread says (``passage_links`` remembers which one);
``threads_fts`` holds one row per thread with the words of all its visible documents
(``thread_rows`` maps threads to rows). Every write to ``passages_fts`` is logged for the
cached postings of its common words (:mod:`memdir.index.postings`) and for the Postgres engine
(:mod:`memdir.index.pglog`), and dropping or emptying it drops them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..doc import turnrecord
from . import pglog, postings

if TYPE_CHECKING:
    from . import Index


def batches(items: list[int], size: int) -> Iterator[list[int]]:
    for lo in range(0, len(items), size):
        yield items[lo : lo + size]


def turn_text(body: str, *, with_compact: bool) -> str | None:
    """What a turn record says: its Input and Output (and Compact when it summarises tools).

    The section headings and the compactor's note for a turn without tool calls say
    nothing about the turn, so they stay out of its vector. None when not a turn body.
    """
    parts = turnrecord.sections(body)
    if "input" not in parts:
        return None
    keep = ("input", "compact", "output") if with_compact else ("input", "output")
    return "\n".join(parts[k] for k in keep if parts.get(k))


def passage(title: str, body: str, user: str | None = None) -> str:
    """The text embedded for a document: its title, then its body without heading marks.

    A document with a ``user`` (a turn record) is prefixed ``user: ``, so who said
    it is part of its meaning (questions name people).
    """
    lines = []
    for line in body.splitlines():
        stripped = line.lstrip()
        lines.append(stripped.lstrip("#").strip() if stripped.startswith("#") else line)
    text = "\n".join(lines).strip()
    if title and not text.startswith(title):
        text = f"{title}\n{text}" if text else title
    return f"{user}: {text}" if user else text


def document_texts(
    conn: sqlite3.Connection, doc_id: int
) -> tuple[str, str, str, str | None] | None:
    """(text to embed, passage title, passage words, thread) of an indexed document.

    The text to embed is also what a reranker reads (:mod:`memdir.retrieval.verbs`).
    """
    row = conn.execute(
        "SELECT d.title, f.body, d.user, d.type, d.fm, d.thread FROM docs d "
        "JOIN docs_fts f ON f.rowid = d.id WHERE d.id = ?",
        (doc_id,),
    ).fetchone()
    if row is None:
        return None
    body = str(row[1] or "")
    turn = None
    if str(row[3] or "").lower() == "turn":
        tools = '"tool_calls"' in str(row[4] or "")
        turn = turn_text(body, with_compact=tools)
    text = (
        f"{row[2]}: {turn}" if turn and row[2] else turn or passage(str(row[0] or ""), body, row[2])
    )
    if turn is not None:
        return text, "", turn, row[5]
    return text, str(row[0] or ""), passage("", body), row[5]


PASSAGES_VERSION = "2"


_TOKENIZER = "tokenize = 'porter unicode61 remove_diacritics 2'"


TABLES = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5("
    f"title, body, context, {_TOKENIZER})",
    "CREATE TABLE IF NOT EXISTS passage_links "
    "(doc_id INTEGER PRIMARY KEY, thread TEXT, prev_id INTEGER)",
    "CREATE INDEX IF NOT EXISTS passage_links_prev ON passage_links(prev_id)",
    "CREATE INDEX IF NOT EXISTS passage_links_thread ON passage_links(thread)",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS threads_fts USING fts5(body, {_TOKENIZER})",
    "CREATE TABLE IF NOT EXISTS thread_rows (row INTEGER PRIMARY KEY, thread TEXT NOT NULL UNIQUE)",
)


NAMES = ("passages_fts", "passage_links", "threads_fts", "thread_rows")


def has_passages(conn: sqlite3.Connection) -> bool:
    """Whether the lexical tables of hybrid search exist in this index."""
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'passage_links' AND type = 'table'"
    ).fetchone()
    return row is not None


def drop(conn: sqlite3.Connection, gone: list[tuple[int, str | None]]) -> None:
    """Delete the passages of these (document, thread) pairs; refresh what followed them."""
    if not gone:
        return
    ids = [doc_id for doc_id, _thread in gone]
    threads = {str(thread) for _doc, thread in gone if thread is not None}
    followers: set[int] = set()
    for part in batches(ids, 500):
        marks = ",".join("?" * len(part))
        conn.execute(f"DELETE FROM passages_fts WHERE rowid IN ({marks})", part)
        postings.note_changes(conn, part, table=postings.PASSAGES)
        pglog.note_ids(conn, part)
        conn.execute(f"DELETE FROM passage_links WHERE doc_id IN ({marks})", part)
        followers.update(
            int(r[0])
            for r in conn.execute(
                f"SELECT doc_id FROM passage_links WHERE prev_id IN ({marks})", part
            )
        )
    threads |= refresh_context(conn, followers)
    rebuild_threads(conn, threads)


def previous(conn: sqlite3.Connection, doc_id: int) -> int | None:
    """The visible document just before this one in its thread (by created, then id)."""
    row = conn.execute(
        "SELECT p.id FROM docs d JOIN docs p ON p.thread = d.thread "
        "WHERE d.id = ? AND p.hidden = 0 AND p.zone = 0 AND p.id != d.id "
        "AND (p.created < d.created OR (p.created = d.created AND p.id < d.id)) "
        "ORDER BY p.created DESC, p.id DESC LIMIT 1",
        (doc_id,),
    ).fetchone()
    return int(row[0]) if row else None


def following(conn: sqlite3.Connection, doc_id: int) -> int | None:
    """The visible document just after this one in its thread."""
    row = conn.execute(
        "SELECT n.id FROM docs d JOIN docs n ON n.thread = d.thread "
        "WHERE d.id = ? AND n.hidden = 0 AND n.zone = 0 AND n.id != d.id "
        "AND (n.created > d.created OR (n.created = d.created AND n.id > d.id)) "
        "ORDER BY n.created, n.id LIMIT 1",
        (doc_id,),
    ).fetchone()
    return int(row[0]) if row else None


def refresh_context(conn: sqlite3.Connection, doc_ids: set[int]) -> set[str]:
    """Set each passage's context to its thread predecessor's words; returns the threads."""
    threads: set[str] = set()
    updated: list[int] = []
    for doc_id in doc_ids:
        link = conn.execute(
            "SELECT thread FROM passage_links WHERE doc_id = ?", (doc_id,)
        ).fetchone()
        if link is None or link[0] is None:
            continue
        threads.add(str(link[0]))
        prev = previous(conn, doc_id)
        words = ""
        if prev is not None:
            row = conn.execute("SELECT body FROM passages_fts WHERE rowid = ?", (prev,)).fetchone()
            words = str(row[0]) if row else ""
        conn.execute("UPDATE passages_fts SET context = ? WHERE rowid = ?", (words, doc_id))
        conn.execute("UPDATE passage_links SET prev_id = ? WHERE doc_id = ?", (prev, doc_id))
        updated.append(doc_id)
    postings.note_changes(conn, updated, table=postings.PASSAGES)
    pglog.note_ids(conn, updated)
    return threads


def rebuild_threads(conn: sqlite3.Connection, threads: set[str]) -> None:
    """Rewrite the aggregate row of each thread from its documents' passages."""
    for thread in threads:
        old = conn.execute("SELECT row FROM thread_rows WHERE thread = ?", (thread,)).fetchone()
        if old is not None:
            conn.execute("DELETE FROM threads_fts WHERE rowid = ?", (int(old[0]),))
            conn.execute("DELETE FROM thread_rows WHERE thread = ?", (thread,))
        bodies = [
            str(r[0])
            for r in conn.execute(
                "SELECT p.body FROM passage_links l JOIN passages_fts p ON p.rowid = l.doc_id "
                "WHERE l.thread = ?",
                (thread,),
            )
        ]
        if not bodies:
            continue
        cur = conn.execute("INSERT INTO threads_fts(body) VALUES (?)", ("\n".join(bodies),))
        conn.execute(
            "INSERT INTO thread_rows(thread, row) VALUES (?, ?)", (thread, int(cur.lastrowid or 0))
        )


def store(conn: sqlite3.Connection, lexical: list[tuple[int, str, str, str | None]]) -> None:
    """Write the lexical rows of these documents, their contexts and their threads."""
    threaded: set[int] = set()
    stale: set[str] = set()  # threads a document leaves (its thread was edited)
    for doc_id, title, words, thread in lexical:
        old = conn.execute(
            "SELECT thread FROM passage_links WHERE doc_id = ?", (doc_id,)
        ).fetchone()
        if old is not None and old[0] is not None and old[0] != thread:
            stale.add(str(old[0]))
            threaded.update(
                int(r[0])
                for r in conn.execute(
                    "SELECT doc_id FROM passage_links WHERE prev_id = ?", (doc_id,)
                )
            )
        conn.execute("DELETE FROM passages_fts WHERE rowid = ?", (doc_id,))
        conn.execute(
            "INSERT INTO passages_fts(rowid, title, body, context) VALUES (?,?,?,'')",
            (doc_id, title, words),
        )
        conn.execute(
            "INSERT OR REPLACE INTO passage_links(doc_id, thread, prev_id) VALUES (?,?,NULL)",
            (doc_id, thread),
        )
        if thread is not None:
            threaded.add(doc_id)
    postings.note_changes(conn, [doc_id for doc_id, *_ in lexical], table=postings.PASSAGES)
    pglog.note_ids(conn, [doc_id for doc_id, *_ in lexical])
    # A document's context is its predecessor's words; its successor's context is its own.
    followers = set(threaded)
    for doc_id in threaded:
        after = following(conn, doc_id)
        if after is not None:
            followers.add(after)
    rebuild_threads(conn, refresh_context(conn, followers) | stale)


def ensure(index: Index) -> None:
    """Create the lexical tables; a new layout re-chunks every document (cache hits)."""
    if index.meta("passages_version") == PASSAGES_VERSION and has_passages(index.conn):
        return
    with index.transaction() as conn:
        for table in NAMES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in TABLES:
            conn.execute(statement)
        postings.drop(conn, postings.PASSAGES)
        pglog.renew(conn)
        conn.execute("DELETE FROM embedded")
        conn.execute(
            "DELETE FROM meta WHERE key IN "
            "('vectors_generation', 'vectors_doc_seq', 'vectors_doc_max')"
        )
        index.set_meta(conn, "passages_version", PASSAGES_VERSION)


def ranked(
    conn: sqlite3.Connection,
    match: str,
    condition: str,
    params: Sequence[Any],
    previous_weight: float,
    depth: int,
) -> list[int]:
    """Document ids by FTS5 BM25 over the passages (title x3, body x1, context x
    ``previous_weight``), best first; ``condition`` filters ``docs d``."""
    rows = conn.execute(
        "SELECT p.rowid FROM passages_fts p JOIN docs d ON d.id = p.rowid "
        f"WHERE passages_fts MATCH ?{condition} "
        f"ORDER BY bm25(passages_fts, 3.0, 1.0, {previous_weight!r}) LIMIT ?",
        (match, *params, depth),
    ).fetchall()
    return [int(r[0]) for r in rows]


def ranked_threads(conn: sqlite3.Connection, match: str, depth: int) -> dict[str, int]:
    """Threads ranked by BM25 over the words of all their visible documents (1 = best)."""
    rows = [
        int(r[0])
        for r in conn.execute(
            "SELECT rowid FROM threads_fts WHERE threads_fts MATCH ? "
            "ORDER BY bm25(threads_fts) LIMIT ?",
            (match, depth),
        )
    ]
    if not rows:
        return {}
    marks = ",".join("?" * len(rows))
    name = {
        int(r[0]): str(r[1])
        for r in conn.execute(f"SELECT row, thread FROM thread_rows WHERE row IN ({marks})", rows)
    }
    return {name[row]: i for i, row in enumerate(rows, start=1) if row in name}
