"""Many purges leave the full-text tables readable, and a damaged one is rebuilt.

Each purge merges the FTS5 tables so that no deleted row's words stay in their segments.
SQLite 3.40's ``optimize`` writes the merged segment one level up each time it meets two
levels, without a cap: after about 1,000 purges with writes between them the table's
structure record passes 2,000 levels (FTS5's limit) and SQLite refuses to open it
("vtable constructor failed"), which stopped every later write to the store.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from helpers import files_holding
from memdir.index.maintenance import FTS_LEVELS_BOUND, fts_levels, merge_fts
from memdir.service import Memory

SECRET = "QuokkaLanternCipher9123"


def age(conn: sqlite3.Connection, table: str, levels: int) -> None:
    """Give ``table`` the structure a long history of merges after writes leaves.

    The growth shows only once the merged segment is larger than a new write's (a small
    one is pulled down to the new segment's level instead), so the table is first given
    a few hundred rows of filler, dropped again at the end.
    """
    words = [f"filler{n}" for n in range(3_000)]
    filler = range(-1_000_000, -1_000_000 + 300)
    for rowid in filler:
        body = " ".join(words[(rowid * 7 + k * 13) % len(words)] for k in range(50))
        conn.execute(f"INSERT INTO {table}(rowid, title, body) VALUES (?, 'f', ?)", (rowid, body))
    conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
    for n in range(levels):
        if (fts_levels(conn, table) or 0) >= levels - 2:
            break
        conn.execute(f"INSERT INTO {table}(rowid, title, body) VALUES (?, 'x', ?)", (-1 - n, "y"))
        conn.execute(f"DELETE FROM {table} WHERE rowid = ?", (-1 - n,))
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
    conn.execute(f"DELETE FROM {table} WHERE rowid < ?", (filler.stop,))
    assert (fts_levels(conn, table) or 0) >= levels - 2, "the table did not age"


def test_purges_after_a_long_history_leave_the_full_text_table_readable(
    store_root: Path,
) -> None:
    with Memory.open(store_root) as mem:
        mem.write("notes/keep.md", "# Keep\n\nThe harbour ferry leaves at noon.\n")
        age(mem.index.conn, "docs_fts", 1_960)
        for n in range(40):  # each one merged by optimize would add two levels
            mem.write(f"notes/s{n}.md", f"# S{n}\n\nThe code is {SECRET}{n}.\n")
            mem.forget(f"notes/s{n}.md", purge=True)
        assert (fts_levels(mem.index.conn, "docs_fts") or 0) < FTS_LEVELS_BOUND
        hits = mem.search("harbour ferry", mode="bm25")
        assert [h.path for h in hits] == ["notes/keep.md"]
        assert mem.search(f"{SECRET}7", mode="bm25") == []
    with Memory.open(store_root) as mem:  # a new connection opens the table too
        mem.write("notes/after.md", "# After\n\nA write after the purges.\n")
        assert [h.path for h in mem.search("purges", mode="bm25")] == ["notes/after.md"]
    assert files_holding(store_root, SECRET) == []


def test_merge_fts_rebuilds_a_table_with_many_levels_and_keeps_its_rows() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(title, body)")
    conn.execute("INSERT INTO t(rowid, title, body) VALUES (7, 'kept', 'amber lighthouse')")
    assert merge_fts(conn, "t") == "optimize"
    age(conn, "t", FTS_LEVELS_BOUND + 1)
    assert merge_fts(conn, "t") == "rebuild"
    assert (fts_levels(conn, "t") or 0) < FTS_LEVELS_BOUND
    rows = conn.execute("SELECT rowid FROM t WHERE t MATCH 'lighthouse'").fetchall()
    assert rows == [(7,)]


def test_an_index_whose_full_text_table_cannot_be_opened_is_rebuilt(store_root: Path) -> None:
    with Memory.open(store_root) as mem:
        mem.write("notes/key.md", f"# Key\n\nThe key is {SECRET}.\n")
        mem.write("notes/other.md", "# Other\n\nA walk along the canal.\n")
        conn = mem.index.conn
        # A structure record that claims more levels than FTS5 allows, as 2,000 merges leave.
        record = bytes(4) + bytes([0x8F, 0x52, 0x00, 0x00]) + bytes(4_004)
        conn.execute("UPDATE docs_fts_data SET block = ? WHERE id = 10", (record,))
    broken = sqlite3.connect(store_root / ".memdir" / "index.db")
    try:
        broken.execute("SELECT rowid FROM docs_fts LIMIT 1").fetchall()
        raise AssertionError("the structure record was not damaged")
    except sqlite3.DatabaseError as exc:
        assert "vtable constructor failed" in str(exc)
    finally:
        broken.close()
    with Memory.open(store_root) as mem:
        assert [h.path for h in mem.search("canal", mode="bm25")] == ["notes/other.md"]
        assert mem.doctor().ok
        aside = list((store_root / ".memdir").glob("index.db.damaged-*"))
        assert aside, "the damaged index was not set aside"
        # The copy set aside holds what the store held: a purge leaves it nowhere.
        mem.forget("notes/key.md", purge=True)
    assert list((store_root / ".memdir").glob("index.db.damaged-*")) == []
    assert files_holding(store_root, SECRET) == []
