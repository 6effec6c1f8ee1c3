"""How the Postgres engine keeps a store's rows in step (docs/postgres.md, *Keeping it in step*).

A real PostgreSQL with pgvector and real stores on disk. The rows a sync writes for the
changed paths only (from the local index's change log) must be the rows a full build
writes; a sync after one edit must read and write that path's rows, not the store's; a
reader replica never writes; a store pushed from another local index, or tables of an
older layout, are built afresh.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import open_postgres, postgres_of, write_turn_page
from memdir.errors import ConfigError
from memdir.files.store import Store
from memdir.index.postgres import PgIndex
from memdir.service import Memory

_names = itertools.count()


def _fill(mem: Memory) -> None:
    for i, said in enumerate(["Which bread do you bake?", "Rye, with a sour starter.", "Nice."]):
        write_turn_page(mem, f"t/a{i}.md", "s1", "ann", f"2023-06-03T10:00:0{i}Z", said)
    for i in range(12):
        mem.write(
            f"notes/n{i}.md",
            f"---\ntitle: Note {i}\ntags: [bread, n{i % 3}]\n---\n\nThe oven {i} bakes "
            f"loaf number {i}; the crust\tof loaf {i} is crisp. Tab\\slash {i}.\n",
        )


def _rows(dsn: str, store: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the store holds in each table, with the store key left out, sorted."""
    import psycopg

    out: dict[str, list[tuple[Any, ...]]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in (
            "memdir_docs",
            "memdir_rows",
            "memdir_terms",
            "memdir_vectors",
            "memdir_counts",
        ):
            rows = conn.execute(f"SELECT * FROM {table} WHERE store = %s", (store,)).fetchall()
            out[table] = sorted((tuple(str(v) for v in r[1:]) for r in rows), key=repr)
    return out


def _tuples_read(dsn: str, pg: PgIndex) -> int:
    """Rows of memdir's tables read so far (scans and index fetches), all sessions."""
    import psycopg

    pg._conn().execute("SELECT pg_stat_force_next_flush()")
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) "
            "FROM pg_stat_user_tables WHERE relname LIKE 'memdir_%'"
        ).fetchone()
    return int(row[0]) if row else 0


def test_changed_paths_get_the_rows_a_full_build_writes(
    tmp_path: Path, pg_server: Any, toy: None
) -> None:
    dsn = pg_server.dsn
    root = Store.init(tmp_path / "store", git=False)
    key = f"same{next(_names)}"
    with open_postgres(root, dsn, key) as mem:
        _fill(mem)
        mem.search("bread", mode="hybrid")  # the first push: a full build
        pg = postgres_of(mem)
        model = mem.retrieval.vector_index().model
        # Edits of every kind: a note changed, one deleted by hand, one added, a turn
        # edited (its follower's passage context changes), a turn removed from a thread.
        mem.write("notes/n1.md", "---\ntitle: Rye\n---\n\nRye bread needs a long proof.\n")
        (root / "notes" / "n2.md").unlink()
        mem.write("notes/new.md", "# New\n\nA brand new loaf of spelt.\n")
        write_turn_page(mem, "t/a1.md", "s1", "bob", "2023-06-03T10:00:01Z", "Spelt, mostly.")
        (root / "t" / "a2.md").unlink()
        mem.search("bread", mode="hybrid")
        stats = pg.sync(mem.index, model, force=True)
        assert not stats.full and stats.changed == 0  # the search pushed everything
        incremental = _rows(dsn, key)
        assert pg.rebuild(mem.index, model).full
        assert _rows(dsn, key) == incremental
    assert len(incremental["memdir_docs"]) == 17  # with the three files of a new store
    assert [r[:2] for r in incremental["memdir_counts"]][:2] == [("0", "17"), ("1", "17")]
    assert incremental["memdir_counts"][2][0] == "2"  # the vectors, counted as they come and go
    assert any("spelt" in str(r) for r in incremental["memdir_terms"])


def test_a_sync_after_one_edit_reads_that_path_only(
    tmp_path: Path, pg_server: Any, toy: None
) -> None:
    dsn = pg_server.dsn
    root = Store.init(tmp_path / "store", git=False)
    key = f"small{next(_names)}"
    with open_postgres(root, dsn, key) as mem:
        _fill(mem)
        for i in range(200):
            mem.write(f"more/m{i}.md", f"# More {i}\n\nAnother loaf, number {i}, of rye.\n")
        mem.search("bread", mode="hybrid")
        pg = postgres_of(mem)
        model = mem.retrieval.vector_index().model
        mem.write("notes/n5.md", "# Five\n\nThe fifth loaf burnt.\n")
        # Tables this small are cheaper to scan than to look up: make the planner look up,
        # as it does at any real size, so what is read is what the sync asks for.
        pg._conn().execute("SET enable_seqscan = off")
        before = _tuples_read(dsn, pg)
        stats = pg.sync(mem.index, model)
        read = _tuples_read(dsn, pg) - before
        assert (stats.docs, stats.full) == (1, False)
        assert read < 50, read  # the store has 215 documents and thousands of term rows
        assert [h.path for h in mem.search("burnt", mode="bm25")] == ["notes/n5.md"]
        # Nothing changed: the next sync does not ask Postgres at all.
        before = _tuples_read(dsn, pg)
        assert pg.sync(mem.index, model).changed == 0
        assert _tuples_read(dsn, pg) == before


def test_a_reader_replica_reads_and_never_writes(tmp_path: Path, pg_server: Any, toy: None) -> None:
    dsn = pg_server.dsn
    key = f"reader{next(_names)}"
    first = Store.init(tmp_path / "writer", git=False)
    with open_postgres(first, dsn, key) as writer:
        _fill(writer)
        writer.search("bread", mode="hybrid")
    second = tmp_path / "reader"
    shutil.copytree(first, second, ignore=shutil.ignore_patterns("*.db*"))
    with (
        open_postgres(first, dsn, key) as writer,
        open_postgres(second, dsn, key, writer=False) as reader,
    ):
        before = _rows(dsn, key)
        assert [h.path for h in reader.search("crisp crust", mode="bm25", limit=3)]
        reader.write("notes/only-here.md", "# Here\n\nA quince tart.\n")
        found = [h.path for h in reader.search("quince tart", mode="hybrid")]
        assert found and "notes/only-here.md" not in found  # not in Postgres: not pushed
        assert _rows(dsn, key) == before
        for mem in (writer, reader):  # the same file in both clones
            mem.write("notes/both.md", "# Both\n\nA damson jam.\n")
        assert reader.search("damson", mode="bm25") == []  # the writer has not pushed yet
        assert [h.path for h in writer.search("damson", mode="bm25")] == ["notes/both.md"]
        assert [h.path for h in reader.search("damson", mode="bm25")] == ["notes/both.md"]


def test_rows_pushed_from_another_local_index_are_built_afresh(
    tmp_path: Path, pg_server: Any, toy: None
) -> None:
    dsn = pg_server.dsn
    key = f"other{next(_names)}"
    first = Store.init(tmp_path / "one", git=False)
    with open_postgres(first, dsn, key) as one:
        _fill(one)
        one.search("bread", mode="hybrid")
    second = tmp_path / "two"
    shutil.copytree(first, second, ignore=shutil.ignore_patterns("*.db*"))
    with open_postgres(second, dsn, key) as two:
        two.write("notes/n3.md", "# Three\n\nA sorrel soup.\n")
        two.sync(force=True)
        two.retrieval.vector_index().sync()
        stats = postgres_of(two).sync(two.index, two.retrieval.vector_index().model)
        assert stats.full and stats.docs == 18
        assert [h.path for h in two.search("sorrel", mode="hybrid", limit=1)] == ["notes/n3.md"]
    with open_postgres(first, dsn, key) as one:  # back to the first: its log is not what was pushed
        one.sync(force=True)
        stats = postgres_of(one).sync(one.index, None)
        assert stats.full
        assert one.search("sorrel", mode="bm25") == []


def test_a_rebuild_replaces_the_partitions_whatever_their_names(
    tmp_path: Path, pg_server: Any, toy: None
) -> None:
    import psycopg

    dsn = pg_server.dsn
    root = Store.init(tmp_path / "store", git=False)
    key = f'it\'s a "key" {next(_names)}'  # quotes in the key: a literal in the DDL
    with open_postgres(root, dsn, key) as mem:
        _fill(mem)
        mem.search("bread", mode="bm25")
        pg = postgres_of(mem)
        with psycopg.connect(dsn, autocommit=True) as conn:
            (name,) = conn.execute(
                "SELECT tableoid::regclass::text FROM memdir_terms WHERE store = %s LIMIT 1",
                (key,),
            ).fetchone()  # type: ignore[misc]
            conn.execute(f"ALTER TABLE {name} RENAME TO memdir_terms_renamed")
        assert pg.rebuild(mem.index, None).full
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('memdir_terms_renamed')").fetchone() == (None,)
        assert [h.path for h in mem.search("crisp crust", mode="bm25", limit=1)]


def test_tables_of_the_first_layout_are_made_again(tmp_path: Path, toy: None) -> None:
    pytest.importorskip("psycopg")
    import psycopg

    from memdir.index import pglocal

    try:
        server = pglocal.start()
    except RuntimeError as exc:
        pytest.skip(f"no PostgreSQL with pgvector: {exc}")
    try:
        with psycopg.connect(server.dsn, autocommit=True) as conn:  # as version 1 left them
            conn.execute(
                "CREATE TABLE memdir_docs (store text NOT NULL, path text NOT NULL, "
                "sig text NOT NULL, zone int NOT NULL, PRIMARY KEY (store, path))"
            )
            conn.execute("INSERT INTO memdir_docs VALUES ('old', 'a.md', 'x', 0)")
            conn.execute("CREATE TABLE memdir_vector_sigs (store text, path text, sig text)")
        root = Store.init(tmp_path / "store", git=False)
        with open_postgres(root, server.dsn, "old") as mem:
            mem.write("a.md", "# A\n\nThe kettle is descaled with vinegar.\n")
            assert [h.path for h in mem.search("vinegar", mode="bm25")] == ["a.md"]
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT to_regclass('memdir_vector_sigs')").fetchone() == (None,)
            # Tables of a newer layout are left alone: this memdir says so and stops.
            conn.execute("UPDATE memdir_meta SET value = '99' WHERE key = 'version'")
        with pytest.raises(ConfigError, match="layout 99, made by a newer memdir"):
            PgIndex(server.dsn, "old").count()
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM memdir_docs").fetchone() == (4,)
    finally:
        server.remove()
