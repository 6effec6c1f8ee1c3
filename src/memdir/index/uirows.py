"""What the web UI reads of the index: the visible documents with their turn fields, and
the link edges among them.

Link rows are as written in the files (a wikilink's name, a markdown link's relative
target); the UI resolves them to paths.
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

GRAPH_KINDS = ("wikilink", "embed", "markdown", "related", "contradicts", "supersedes")
"""The kinds that are edges of the link graph (``parent`` is the turn DAG, ``merged-from``
provenance)."""


def edges(conn: sqlite3.Connection, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(source path, kind, target)`` of every graph link of a visible document under
    ``prefix`` (not forgotten, outside the hidden zones: ``quarantine/``, ``conflicts/``)."""
    marks = ", ".join("?" for _ in GRAPH_KINDS)
    sql = (
        "SELECT d.path, l.kind, l.target FROM links l JOIN docs d ON d.id = l.src "
        f"WHERE d.hidden = 0 AND d.zone = 0 AND l.kind IN ({marks})"
    )
    params: list[str] = list(GRAPH_KINDS)
    if prefix:
        sql += " AND substr(d.path, 1, ?) = ?"
        params += [str(len(prefix)), prefix]
    cur = conn.cursor()
    cur.row_factory = None
    rows = cur.execute(sql + " ORDER BY l.rowid", params)  # each document's links in its order
    return [(str(a), str(b), str(c)) for a, b, c in rows]


class DocRow(NamedTuple):
    path: str
    title: str
    type: str
    thread: str
    user: str
    created: str


def visible(conn: sqlite3.Connection, prefix: str = "") -> list[DocRow]:
    """Every visible document under ``prefix`` (not forgotten, outside the hidden zones),
    in walk order."""
    sql = (
        "SELECT path, title, coalesce(type, ''), coalesce(thread, ''), coalesce(user, ''), "
        "coalesce(created, '') FROM docs WHERE hidden = 0 AND zone = 0"
    )
    params: list[str] = []
    if prefix:
        sql += " AND substr(path, 1, ?) = ?"
        params += [str(len(prefix)), prefix]
    cur = conn.cursor()
    cur.row_factory = None
    rows = cur.execute(sql + " ORDER BY walk_key", params).fetchall()
    return [DocRow(*(str(v) for v in row)) for row in rows]


def zone_count(conn: sqlite3.Connection, folder: str) -> int:
    """How many indexed documents lie under ``folder`` (``inbox/``, ``quarantine/``)."""
    where, params = _under(folder)
    row = conn.execute(f"SELECT count(*) FROM docs d WHERE {where}", params).fetchone()
    return int(row[0])


# -- what changed since the UI last looked ------------------------------------------------
# A write bumps the index generation; the UI's caches would rebuild whole (a second or more
# at 100k documents). Instead, triggers on ``docs`` log the id of every row inserted,
# updated or deleted, in any process, with a rising sequence number: the UI reads the ids
# logged after the last number it saw and updates only those documents. The log holds ids
# and numbers, no path or text (a purge leaves nothing of the document here), one row per id.
# A mark row (id 0, never a document's) is laid when the log is made; a rebuild empties
# every derived table, the mark with it, and a log without its mark reads as "start over".

CHANGE_LOG = "ui_changes"
_MARK = 0


def watch(conn: sqlite3.Connection) -> int:
    """Make the change log and its triggers if they are missing, lay its mark if it was
    emptied; returns the log's last sequence number. In the caller's write transaction."""
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {CHANGE_LOG} "
        "(doc_id INTEGER PRIMARY KEY, seq INTEGER NOT NULL)"
    )
    conn.execute(f"CREATE INDEX IF NOT EXISTS {CHANGE_LOG}_seq ON {CHANGE_LOG}(seq)")
    next_seq = f"(SELECT coalesce(max(seq), 0) + 1 FROM {CHANGE_LOG})"
    for event, row in (("INSERT", "new"), ("UPDATE", "new"), ("DELETE", "old")):
        conn.execute(
            f"CREATE TRIGGER IF NOT EXISTS {CHANGE_LOG}_{event.lower()} AFTER {event} ON docs "
            f"BEGIN INSERT OR REPLACE INTO {CHANGE_LOG}(doc_id, seq) "
            f"VALUES ({row}.id, {next_seq}); END"
        )
    marked = conn.execute(f"SELECT 1 FROM {CHANGE_LOG} WHERE doc_id = ?", (_MARK,)).fetchone()
    if marked is None:
        conn.execute(f"INSERT INTO {CHANGE_LOG}(doc_id, seq) VALUES (?, {next_seq})", (_MARK,))
    return _last(conn)


def _last(conn: sqlite3.Connection) -> int:
    row = conn.execute(f"SELECT coalesce(max(seq), 0) FROM {CHANGE_LOG}").fetchone()
    return int(row[0])


def changes(conn: sqlite3.Connection, since: int, limit: int) -> tuple[int, list[int]] | None:
    """``(last sequence number, ids changed after since)``; None when the log cannot say
    (it is missing, was emptied, or holds more than ``limit`` changes: read everything)."""
    try:
        marked = conn.execute(f"SELECT 1 FROM {CHANGE_LOG} WHERE doc_id = ?", (_MARK,)).fetchone()
        triggers = conn.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE ?",
            (f"{CHANGE_LOG}_%",),
        ).fetchone()[0]
    except sqlite3.OperationalError:  # no such table
        return None
    if marked is None or int(triggers) < 3:
        return None
    last = _last(conn)
    cur = conn.cursor()
    cur.row_factory = None
    rows = cur.execute(
        f"SELECT doc_id FROM {CHANGE_LOG} WHERE seq > ? AND doc_id != ? LIMIT ?",
        (since, _MARK, limit + 1),
    ).fetchall()
    if len(rows) > limit:
        return None
    return last, [int(r[0]) for r in rows]


def visible_keyed(conn: sqlite3.Connection, ids: list[int] | None = None) -> list[KeyedRow]:
    """:func:`visible` with each row's id and walk key; of ``ids`` only when given."""
    sql = (
        "SELECT id, walk_key, path, title, coalesce(type, ''), coalesce(thread, ''), "
        "coalesce(user, ''), coalesce(created, '') FROM docs WHERE hidden = 0 AND zone = 0"
    )
    cur = conn.cursor()
    cur.row_factory = None
    if ids is None:
        found = cur.execute(sql + " ORDER BY walk_key").fetchall()
    else:
        found = []
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ", ".join("?" for _ in part)
            found += cur.execute(sql + f" AND id IN ({marks})", part).fetchall()
    return [KeyedRow(int(r[0]), bytes(r[1]), DocRow(*(str(v) for v in r[2:]))) for r in found]


def edges_of(conn: sqlite3.Connection, ids: list[int] | None = None) -> list[tuple[str, str, str]]:
    """:func:`edges` of every visible document, or of ``ids`` only."""
    if ids is None:
        return edges(conn)
    marks_kind = ", ".join("?" for _ in GRAPH_KINDS)
    out: list[tuple[str, str, str]] = []
    cur = conn.cursor()
    cur.row_factory = None
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        marks = ", ".join("?" for _ in part)
        sql = (
            "SELECT d.path, l.kind, l.target FROM links l JOIN docs d ON d.id = l.src "
            f"WHERE d.hidden = 0 AND d.zone = 0 AND l.kind IN ({marks_kind}) "
            f"AND d.id IN ({marks}) ORDER BY l.rowid"
        )
        out += [(str(a), str(b), str(c)) for a, b, c in cur.execute(sql, [*GRAPH_KINDS, *part])]
    return out


class KeyedRow(NamedTuple):
    id: int
    walk_key: bytes
    row: DocRow


def facts_keyed(
    conn: sqlite3.Connection, ids: list[int] | None = None
) -> list[tuple[int, bytes, str]]:
    """``(id, walk key, memory-report facts as JSON)`` of every document, hidden ones and
    the zones included (the report counts them all), or of ``ids`` only."""
    sql = "SELECT id, walk_key, facts FROM docs"
    cur = conn.cursor()
    cur.row_factory = None
    if ids is None:
        rows = cur.execute(sql + " ORDER BY walk_key").fetchall()
    else:
        rows = []
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ", ".join("?" for _ in part)
            rows += cur.execute(sql + f" WHERE id IN ({marks})", part).fetchall()
    return [(int(a), bytes(b), str(c)) for a, b, c in rows]


def _under(prefix: str, column: str = "d.path") -> tuple[str, list[str]]:
    """A condition on ``column`` for "under ``prefix``" that the path index can answer
    (``+d.path``: the same condition, the index kept out of it)."""
    if not prefix:
        return "1 = 1", []
    last = prefix[-1]
    if ord(last) >= 0x10FFFF or 0xD7FF <= ord(last) < 0xE000:
        return f"substr({column}, 1, ?) = ?", [str(len(prefix)), prefix]
    return f"{column} >= ? AND {column} < ?", [prefix, prefix[:-1] + chr(ord(last) + 1)]


def home_counts(conn: sqlite3.Connection, prefix: str = "") -> dict[str, int]:
    """What the home page counts of the visible documents under ``prefix``: turns (under
    ``episodes/turns/``) and their threads, the other episodes, the wiki's articles (its
    ``index.md`` and ``log.md`` pages left out)."""
    where, params = _under(prefix)
    visible = f"d.hidden = 0 AND d.zone = 0 AND {where}"

    def one(sql: str, *extra: str) -> int:
        return int(conn.execute(sql, [*params, *extra]).fetchone()[0])

    turns_at, turns_params = _under("episodes/turns/")
    turns = f"FROM docs d WHERE {visible} AND {turns_at} AND d.type = 'turn'"
    episodes_at, episodes_params = _under("episodes/")
    wiki_at, wiki_params = _under("wiki/")
    return {
        "turns": one(f"SELECT count(*) {turns}", *turns_params),
        "threads": one(
            f"SELECT count(DISTINCT d.thread) {turns} AND coalesce(d.thread, '') != ''",
            *turns_params,
        ),
        "episodes": one(
            f"SELECT count(*) FROM docs d WHERE {visible} AND {episodes_at} "
            "AND coalesce(d.type, '') != 'turn'",
            *episodes_params,
        ),
        "articles": one(
            f"SELECT count(*) FROM docs d WHERE {visible} AND {wiki_at} "
            "AND NOT (d.path GLOB '*/index.md' OR d.path GLOB '*/log.md')",
            *wiki_params,
        ),
    }


def latest_turns(conn: sqlite3.Connection, prefix: str = "", limit: int = 10) -> list[DocRow]:
    """The newest ``limit`` visible turns under ``prefix`` and ``episodes/turns/``."""
    where, params = _under(prefix)
    turns_at, turns_params = _under("episodes/turns/")
    sql = (
        "SELECT d.path, d.title, coalesce(d.type, ''), coalesce(d.thread, ''), "
        "coalesce(d.user, ''), coalesce(d.created, '') FROM docs d "
        f"WHERE d.hidden = 0 AND d.zone = 0 AND {where} AND {turns_at} AND d.type = 'turn' "
        "ORDER BY d.created DESC, d.walk_key LIMIT ?"
    )
    cur = conn.cursor()
    cur.row_factory = None
    rows = cur.execute(sql, [*params, *turns_params, limit]).fetchall()
    return [DocRow(*(str(v) for v in row)) for row in rows]


SORT_LIMIT = 2000
_ROW = (
    "d.path, d.title, coalesce(d.type, ''), coalesce(d.thread, ''), coalesce(d.user, ''), "
    "coalesce(d.created, '')"
)


def under(
    conn: sqlite3.Connection, prefix: str, offset: int, limit: int
) -> tuple[int, list[DocRow]]:
    """How many visible documents lie under ``prefix``, and ``limit`` of them from
    ``offset`` in walk order: counted by the path index's range, not by a scan of every row.
    A few thousand are read by that range and sorted; more, along the walk index (sorting
    60,000 rows costs more than stepping over the rows outside the prefix)."""
    where, params = _under(prefix)
    visible = "d.hidden = 0 AND d.zone = 0 AND "
    sql = f"SELECT count(*) FROM docs d WHERE {visible}{where}"
    count = int(conn.execute(sql, params).fetchone()[0])
    if count > SORT_LIMIT:
        where, params = _under(prefix, "+d.path")
    cur = conn.cursor()
    cur.row_factory = None
    rows = cur.execute(
        f"SELECT {_ROW} FROM docs d WHERE {visible}{where} ORDER BY d.walk_key LIMIT ? OFFSET ?",
        [*params, limit, offset],
    ).fetchall()
    return count, [DocRow(*(str(v) for v in row)) for row in rows]


def turn_rows(conn: sqlite3.Connection, prefix: str = "") -> list[DocRow]:
    """Every visible turn record under ``prefix`` and ``episodes/turns/`` (by the type
    index: a few hundred rows, not every document)."""
    where, params = _under(prefix)
    turns_at, turns_params = _under("episodes/turns/")
    cur = conn.cursor()
    cur.row_factory = None
    rows = cur.execute(
        f"SELECT {_ROW} FROM docs d WHERE d.type = 'turn' AND d.hidden = 0 AND d.zone = 0 "
        f"AND {where} AND {turns_at}",
        [*params, *turns_params],
    ).fetchall()
    return [DocRow(*(str(v) for v in row)) for row in rows]
