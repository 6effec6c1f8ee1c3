"""A full rebuild builds the secondary indexes once at the end, and never loses one."""

from __future__ import annotations

import json
import sqlite3

from memdir.index.db import PENDING_INDEXES, connect
from memdir.service import Memory


def indexes(conn: sqlite3.Connection) -> dict[str, str]:
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql NOT NULL")
    return {str(n): str(s) for n, s in rows}


def test_rebuild_keeps_every_index_and_every_row(mem: Memory) -> None:
    for n in range(30):
        mem.write(f"notes/n{n}.md", f"---\ntitle: N{n}\nepisode_id: e{n}\n---\nsee [[n{n + 1}]]\n")
    before = indexes(mem.index.conn)
    hits = sorted((h.path, h.score) for h in mem.search("see", mode="bm25", limit=50))
    count = mem.index.conn.execute("SELECT count(*) FROM docs").fetchone()[0]
    stats = mem.reindex(full=True)
    assert stats.added == count >= 30
    conn = mem.index.conn
    assert indexes(conn) == before
    assert conn.execute("SELECT 1 FROM meta WHERE key = ?", (PENDING_INDEXES,)).fetchone() is None
    assert sorted((h.path, h.score) for h in mem.search("see", mode="bm25", limit=50)) == hits
    plan = " ".join(
        str(r[3])
        for r in conn.execute("EXPLAIN QUERY PLAN SELECT id FROM docs WHERE episode_id = 'e3'")
    )
    assert "INDEX" in plan
    assert mem.doctor().ok


def test_a_rebuild_killed_midway_gets_its_indexes_back(mem: Memory) -> None:
    mem.write("a.md", "---\nepisode_id: a\n---\nA\n")
    conn = mem.index.conn
    before = indexes(conn)
    # what a rebuild leaves when it is killed after dropping the indexes
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?)",
        (PENDING_INDEXES, json.dumps([before[n] for n in before if n.startswith("docs_")])),
    )
    for name in before:
        if name.startswith("docs_"):
            conn.execute(f'DROP INDEX "{name}"')
    conn.execute("COMMIT")
    assert indexes(conn) != before
    again = connect(mem.index.path)
    try:
        assert indexes(again) == before
    finally:
        again.close()


def test_a_bulk_sync_leaves_an_empty_write_ahead_log(mem: Memory) -> None:
    from memdir.index import BULK_CHANGES

    folder = mem.root / "bulk"
    folder.mkdir()
    for n in range(BULK_CHANGES):
        (folder / f"b{n}.md").write_text(f"bulk {n}\n")
    stats = mem.sync()
    assert stats.added >= BULK_CHANGES
    wal = mem.index.path.parent / (mem.index.path.name + "-wal")
    assert wal.stat().st_size == 0
    (folder / "one.md").write_text("one more\n")
    mem.sync()
    assert wal.stat().st_size > 0  # a small sync leaves the log to SQLite


def test_a_rebuild_adds_files_in_path_order(mem: Memory) -> None:
    """Turn paths sort by time; rows must too, whatever order the folder walk gives them.

    The turns are recorded newest first, so creation order is the reverse of time order.
    """
    from memdir.doc.ids import new_id

    ids = [new_id() for _ in range(30)]
    for ident in reversed(ids):
        mem.record_turn(thread="t", input=f"deploy {ident}", output="ok", id=ident)
    mem.index.conn.execute("DELETE FROM docs")  # as after a lost index: every file is new
    mem.reindex(full=True)
    rows = [
        r[0]
        for r in mem.index.conn.execute("SELECT path FROM docs WHERE type = 'turn' ORDER BY id")
    ]
    assert len(rows) == 30 and rows == sorted(rows)
