"""Vector search through an approximate index in Postgres (docs/postgres.md, *Vector search*).

A real PostgreSQL with pgvector. A store with at least ``index.approximate_from`` vectors
gets an HNSW index on its vectors partition, built with a full build or once an
incremental sync has grown the store to that size; its searches go through the index,
fall back to more candidates and then to the exact scan when the filters leave too few,
and give what the exact scan gives on a store this small.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from helpers import open_postgres, postgres_of
from memdir.files.store import Store
from memdir.service import Memory

_names = itertools.count()
WORDS = "oven rye crust starter kettle vinegar garden hedge ladder bicycle chain saddle".split()


def _note(i: int) -> str:
    a, b, c = WORDS[i % 12], WORDS[(i * 5 + 1) % 12], WORDS[(i * 7 + 3) % 12]
    return f"# Note {i}\n\nThe {a} and the {b} {'and the ' + c if i % 2 else ''} number {i}.\n"


def _fill(mem: Memory, start: int, stop: int, folder: str = "notes") -> None:
    for i in range(start, stop):
        mem.write(f"{folder}/n{i}.md", _note(i))


def _hnsw(dsn: str, store: str) -> list[str]:
    """The definitions of the HNSW indexes on the store's vectors partition."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT i.indexdef FROM pg_indexes i JOIN pg_class c ON c.relname = i.tablename "
            "JOIN pg_inherits h ON h.inhrelid = c.oid "
            "WHERE h.inhparent = 'memdir_vectors'::regclass AND i.indexdef LIKE '%%hnsw%%' "
            "AND pg_get_expr(c.relpartbound, c.oid) = "
            "'FOR VALUES IN (' || quote_literal(%s) || ')'",
            (store,),
        ).fetchall()
    return [str(r[0]) for r in rows]


def _index_scans(conn: Any) -> int:
    """Scans of every HNSW index so far, this session's included."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT coalesce(sum(s.idx_scan), 0) FROM pg_stat_user_indexes s "
        "JOIN pg_indexes i ON i.indexname = s.indexrelname WHERE i.indexdef LIKE '%hnsw%'"
    ).fetchone()
    return int(row[0])


def _vectors(dsn: str, store: str) -> int:
    """The store's vectors as memdir_counts has them, checked against its rows."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        counted = conn.execute(
            "SELECT n FROM memdir_counts WHERE store = %s AND kind = 2", (store,)
        ).fetchone()
        rows = conn.execute(
            "SELECT count(*) FROM memdir_vectors WHERE store = %s", (store,)
        ).fetchone()
    assert counted is not None and rows is not None and counted[0] == rows[0]
    return int(rows[0])


def _ranked(mem: Memory, query: str, **kw: Any) -> list[tuple[str, float]]:
    return [(h.path, round(h.score, 4)) for h in mem.search(query, mode="vector", **kw)]


QUERIES = ["rye crust", "garden ladder", "bicycle chain saddle", "kettle", "the oven number 7"]


def test_a_large_store_searches_through_the_index_as_the_scan_ranks(
    tmp_path: Path, pg_server: Any, toy: None
) -> None:
    dsn = pg_server.dsn
    root = Store.init(tmp_path / "store", git=False)
    near, exact = f"near{next(_names)}", f"exact{next(_names)}"
    with open_postgres(root, dsn, near, approximate_from=30) as mem:
        _fill(mem, 0, 60)
        mem.search("rye", mode="hybrid")  # the first push: a full build
        assert len(_hnsw(dsn, near)) == 1 and "vector_ip_ops" in _hnsw(dsn, near)[0]
        # A table this small is cheaper to scan and sort than to search through its index:
        # make the planner use the index, as it does at the sizes the index is made for.
        conn = postgres_of(mem)._conn()
        for plan in ("seqscan", "bitmapscan", "sort"):
            conn.execute(f"SET enable_{plan} = off")
        used = _index_scans(conn)
        approximate = {q: _ranked(mem, q, limit=8) for q in QUERIES}
        assert _index_scans(conn) >= used + len(QUERIES)
        assert postgres_of(mem).vector_scans["approximate"] >= len(QUERIES)
        assert postgres_of(mem).vector_scans["exact"] == 0
    with open_postgres(root, dsn, exact, approximate_from=0) as mem:
        assert {q: _ranked(mem, q, limit=8) for q in QUERIES} == approximate
        assert postgres_of(mem).vector_scans == {"approximate": 0, "exact": len(QUERIES)}
        assert _hnsw(dsn, exact) == []
    with open_postgres(root, dsn, near, approximate_from=0) as mem:  # the index is there, unused
        assert _ranked(mem, QUERIES[0], limit=8) == approximate[QUERIES[0]]
        assert postgres_of(mem).vector_scans == {"approximate": 0, "exact": 1}
    assert all(len(hits) == 8 for hits in approximate.values())


def test_a_store_grown_to_the_threshold_gets_its_index(
    tmp_path: Path, pg_server: Any, toy: None
) -> None:
    dsn = pg_server.dsn
    root = Store.init(tmp_path / "store", git=False)
    key = f"grown{next(_names)}"
    with open_postgres(root, dsn, key, approximate_from=0) as mem:
        _fill(mem, 0, 20)
        mem.search("rye", mode="vector")
    has = _vectors(dsn, key)
    with open_postgres(root, dsn, key, approximate_from=has + 10) as mem:
        mem.write("notes/extra.md", _note(99))
        mem.search("rye", mode="vector")  # an incremental sync, still under the threshold
        assert _vectors(dsn, key) > has
        assert _hnsw(dsn, key) == [] and postgres_of(mem).vector_scans == {
            "approximate": 0,
            "exact": 1,
        }
        _fill(mem, 20, 45)
        found = _ranked(mem, "rye crust", limit=5)
        assert len(_hnsw(dsn, key)) == 1
        assert postgres_of(mem).vector_scans["approximate"] == 1
        # Deleted and edited documents leave the index with their rows.
        gone = found[0][0]
        (root / gone).unlink()
        mem.write("notes/n3.md", "# Three\n\nNothing but a teapot here.\n")
        after = [p for p, _ in _ranked(mem, "rye crust", limit=50)]
        assert gone not in after and len(after) == len(set(after))
        assert [p for p, _ in _ranked(mem, "teapot", limit=1)] == ["notes/n3.md"]


def test_filters_that_leave_few_candidates_take_more_then_scan(
    tmp_path: Path, pg_server: Any, toy: None
) -> None:
    dsn = pg_server.dsn
    root = Store.init(tmp_path / "store", git=False)
    near, exact = f"few{next(_names)}", f"fewexact{next(_names)}"
    with open_postgres(root, dsn, near, approximate_from=10, approximate_candidates=1) as mem:
        _fill(mem, 0, 80)
        _fill(mem, 80, 83, folder="rare")
        mem.search("rye", mode="hybrid")
        narrow = _ranked(mem, "rye crust", limit=3, path_prefix="rare/")
        rounds = postgres_of(mem).vector_scans["approximate"]
        # 12 candidates first (four per hit asked), then four times as many each round.
        assert rounds >= 2
        # More asked than the filter allows: every round, then the exact scan.
        every = _ranked(mem, "rye crust", limit=5, path_prefix="rare/")
        assert postgres_of(mem).vector_scans["exact"] == 1
    with open_postgres(root, dsn, exact, approximate_from=0) as mem:
        assert _ranked(mem, "rye crust", limit=3, path_prefix="rare/") == narrow
        assert _ranked(mem, "rye crust", limit=5, path_prefix="rare/") == every
    assert sorted(p for p, _ in every) == ["rare/n80.md", "rare/n81.md", "rare/n82.md"]


def test_the_threshold_and_candidates_are_checked(tmp_path: Path) -> None:
    from memdir.errors import ConfigError

    root = Store.init(tmp_path / "store", git=False)
    for bad in ({"approximate_candidates": 0}, {"approximate_candidates": 5000},
                {"approximate_from": -1}):  # fmt: skip
        with pytest.raises(ConfigError, match="approximate"):
            Memory.open(root, overrides={"index": bad}).close()
