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
    ``prefix`` (not forgotten, outside ``quarantine/`` and ``inbox/``)."""
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
    return [(str(a), str(b), str(c)) for a, b, c in cur.execute(sql, params)]


class DocRow(NamedTuple):
    path: str
    title: str
    type: str
    thread: str
    user: str
    created: str


def visible(conn: sqlite3.Connection, prefix: str = "") -> list[DocRow]:
    """Every visible document under ``prefix`` (not forgotten, outside ``quarantine/`` and
    ``inbox/``), in walk order."""
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
    row = conn.execute(
        "SELECT count(*) FROM docs WHERE substr(path, 1, ?) = ?", (len(folder), folder)
    ).fetchone()
    return int(row[0])
