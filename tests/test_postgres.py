"""The Postgres engine of the index (docs/postgres.md): a real PostgreSQL with pgvector.

Searches through ``[index] engine = "postgres"`` must give what the SQLite engine gives on
the same store, in every mode and under every filter; ``reindex --full`` rebuilds the shared
rows; one database holds many stores; two writers of one store take turns; a server that
goes away gives a clear error (CLI, HTTP 503) and searches work again once it is back.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from helpers import serve_process, write_turn_page
from memdir.cli import cli
from memdir.errors import IndexUnavailable
from memdir.files.store import Store
from memdir.service import Memory

_names = itertools.count()

QUERIES = [
    "violin rehearsal",
    "kayaking lake cold",
    "sourdough starter flour",
    "oven crust steam",
    "which instrument",
    "yeast",
    "bread",
    "snake_case tokens",
]


def _fill(mem: Memory) -> None:
    """A small store: turns in two threads, notes with tags and kinds, a superseded page."""
    write_turn_page(
        mem, "t/a1.md", "s1", "ann", "2023-06-03T10:00:00Z", "Which instrument do you play?"
    )
    write_turn_page(
        mem, "t/a2.md", "s1", "bob", "2023-06-03T10:00:01Z", "The violin, mostly classical."
    )
    write_turn_page(
        mem, "t/a3.md", "s1", "ann", "2023-06-03T10:00:02Z", "Lovely, see you at rehearsal."
    )
    write_turn_page(
        mem, "t/b1.md", "s2", "ann", "2023-07-20T09:00:00Z", "We went kayaking on the lake."
    )
    write_turn_page(mem, "t/b2.md", "s2", "bob", "2023-07-20T09:00:01Z", "Sounds fun, was it cold?")
    notes = [
        ("notes/starter.md", "semantic", ["bread", "care"], "Feed the sourdough starter daily "
         "with equal weights of flour and water; bread needs a lively starter."),
        ("notes/crust.md", "semantic", ["bread"], "A hot oven with steam gives bread a crisp "
         "crust. Bake the loaf on a preheated stone so the flour crust sets."),
        ("notes/yeast.md", "procedural", ["yeast", 3], "Dried yeast keeps for months in a "
         "closed jar. Wake the yeast in warm water with flour before baking bread."),
        ("wiki/lake.md", "semantic", [], "The lake is cold in July; kayaking is best at dawn."),
        ("wiki/code.md", "semantic", ["code"], "snake_case names split into tokens; the "
         "tokens of a name are words too."),
    ]  # fmt: skip
    for path, kind, tags, body in notes:
        title = path.rsplit("/", 1)[-1].removesuffix(".md").title()
        mem.write(
            path,
            f"---\ntitle: {title}\nmemory_kind: {kind}\ntags: {json.dumps(tags)}\n---\n\n{body}\n",
        )
    mem.write("wiki/old.md", "---\ntitle: Old bread\n---\n\nStale bread notes about the oven.\n")
    mem.forget("wiki/old.md", reason="stale")


def _open(root: Path, dsn: str | None, store: str = "", **extra: Any) -> Memory:
    overrides: dict[str, Any] = {
        "store": {"git_commit": False},
        "embeddings": {"provider": "letters"},
        **extra,
    }
    if dsn is not None:
        overrides["index"] = {"engine": "postgres", "dsn": dsn, "store": store or root.name}
    return Memory.open(root, overrides=overrides)


@pytest.fixture
def dsn(pg_server: Any) -> str:
    return str(pg_server.dsn)


@pytest.fixture
def pair(tmp_path: Path, dsn: str, toy: None) -> Iterator[tuple[Memory, Memory]]:
    """The same small store opened with the SQLite engine and with the Postgres engine."""
    root = Store.init(tmp_path / f"store{next(_names)}", git=False)
    with _open(root, None) as local:
        _fill(local)
    with _open(root, None) as local, _open(root, dsn, f"parity{next(_names)}") as shared:
        yield local, shared


def _ranked(mem: Memory, query: str, **kw: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(hit.path, hit.why) for hit in mem.search(query, limit=8, **kw)]


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
def test_every_mode_ranks_as_the_sqlite_engine(pair: tuple[Memory, Memory], mode: str) -> None:
    local, shared = pair
    compared = 0
    for query in QUERIES:
        want = _ranked(local, query, mode=mode)
        got = _ranked(shared, query, mode=mode)
        assert got == want, (mode, query)
        compared += bool(want)
    assert compared >= 6  # the queries find something
    assert shared.retrieval.pg is not None and shared.retrieval.pg.count() > 0


@pytest.mark.parametrize(
    "filters",
    [
        {"path_prefix": "notes/"},
        {"path_prefix": "t/a"},
        {"kind": "EPISODIC"},
        {"type": "turn"},
        {"where": {"tags": "bread"}},
        {"where": {"tags": 3}},
        {"where": {"user": "bob"}},
        {"include_superseded": True},
    ],
)
def test_filters_rank_as_the_sqlite_engine(
    pair: tuple[Memory, Memory], filters: dict[str, Any]
) -> None:
    local, shared = pair
    for mode in ("bm25", "hybrid"):
        for query in ("bread oven", "violin kayaking lake", "yeast flour"):
            want = _ranked(local, query, mode=mode, **filters)
            assert _ranked(shared, query, mode=mode, **filters) == want, (mode, query)


def test_a_filter_few_of_the_best_rows_pass_ranks_as_the_sqlite_engine(
    tmp_path: Path, dsn: str, toy: None
) -> None:
    # BM25 filters the best rows first (postgres.BM25_CANDIDATES); here every one of them
    # fails the prefix, and the hits are rows far below them. (Each row of its own length:
    # exact ties are ordered by path here and by row id in SQLite.)
    from memdir.index.postgres import BM25_CANDIDATES

    root = Store.init(tmp_path / "store", git=False)
    with _open(root, None) as local:
        for i in range(BM25_CANDIDATES + 40):
            crumbs = " crumb" * i
            local.write(f"many/m{i}.md", f"# Loaf {i}\n\nRye loaf, rye loaf, rye loaf.{crumbs}\n")
        for i in range(5):
            local.write(f"few/f{i}.md", f"# Note {i}\n\nOne rye among {'many words ' * i}.\n")
    with _open(root, None) as local, _open(root, dsn, f"few{next(_names)}") as shared:
        for mode in ("bm25", "hybrid"):
            want = _ranked(local, "rye loaf", mode=mode, path_prefix="few/")
            assert len(want) == 5
            assert _ranked(shared, "rye loaf", mode=mode, path_prefix="few/") == want, mode
        assert _ranked(shared, "rye", mode="bm25") == _ranked(local, "rye", mode="bm25")


def test_superseded_page_is_found_only_when_asked(pair: tuple[Memory, Memory]) -> None:
    _, shared = pair
    assert "wiki/old.md" not in [h.path for h in shared.search("stale", mode="bm25")]
    found = shared.search("stale", mode="bm25", include_superseded=True)
    assert [h.path for h in found] == ["wiki/old.md"]


def test_writes_edits_and_deletes_reach_the_shared_index(pair: tuple[Memory, Memory]) -> None:
    local, shared = pair
    shared.write("notes/tuba.md", "# Tuba\n\nThe tuba player joined the rehearsal.\n")
    assert shared.search("tuba", mode="bm25")[0].path == "notes/tuba.md"
    shared.write("notes/tuba.md", "# Horn\n\nThe horn player joined the rehearsal.\n")
    assert shared.search("tuba", mode="bm25") == []
    assert [h.path for h in shared.search("horn", mode="hybrid")][0] == "notes/tuba.md"
    (shared.store.root / "notes" / "tuba.md").unlink()  # by hand: the next sync sees it
    assert "notes/tuba.md" not in [h.path for h in shared.search("horn player", mode="hybrid")]
    assert _ranked(shared, "rehearsal", mode="hybrid") == _ranked(local, "rehearsal", mode="hybrid")


def test_one_database_holds_many_stores(tmp_path: Path, dsn: str, toy: None) -> None:
    roots = [Store.init(tmp_path / name, git=False) for name in ("red", "blue")]
    key = f"many{next(_names)}"
    with _open(roots[0], dsn, f"{key}-red") as red, _open(roots[1], dsn, f"{key}-blue") as blue:
        red.write("n.md", "# Red\n\nThe crimson kite flew.\n")
        blue.write("n.md", "# Blue\n\nThe azure kite sank.\n")
        blue.write("m.md", "# Also blue\n\nAnother azure kite.\n")
        assert [h.title for h in red.search("kite", mode="bm25")] == ["Red"]
        assert {h.title for h in blue.search("kite", mode="bm25")} == {"Blue", "Also blue"}
        assert red.search("azure", mode="bm25") == []
        assert red.retrieval.pg is not None and blue.retrieval.pg is not None
        assert blue.retrieval.pg.count() == red.retrieval.pg.count() + 1


def test_reindex_full_rebuilds_the_shared_rows(tmp_path: Path, dsn: str, toy: None) -> None:
    root = Store.init(tmp_path / "store", git=False)
    key = f"rebuild{next(_names)}"
    with _open(root, dsn, key) as mem:
        _fill(mem)
        before = _ranked(mem, "bread oven", mode="hybrid")
        pg = mem.retrieval.pg
        assert pg is not None
        with pg._session() as conn:  # lose the shared rows (as a new database would)
            for table in ("memdir_docs", "memdir_rows", "memdir_terms", "memdir_vectors"):
                conn.execute(f"DELETE FROM {table} WHERE store = %s", (key,))
        assert pg.count() == 0
    env = {
        "MEMDIR_INDEX_ENGINE": "postgres",
        "MEMDIR_INDEX_DSN": dsn,
        "MEMDIR_INDEX_STORE": key,
        "MEMDIR_EMBEDDINGS_PROVIDER": "letters",
        "MEMDIR_STORE_GIT_COMMIT": "false",
    }
    done = CliRunner().invoke(cli, ["--root", str(root), "reindex", "--full"], env=env)
    assert done.exit_code == 0, done.output
    with _open(root, dsn, key) as mem:
        pg = mem.retrieval.pg
        assert pg is not None and pg.count() == _markdown_files(root)
        assert _ranked(mem, "bread oven", mode="hybrid") == before


def test_two_writers_take_turns_on_the_store_lock(tmp_path: Path, dsn: str, toy: None) -> None:
    root = Store.init(tmp_path / "store", git=False)
    key = f"lock{next(_names)}"
    with _open(root, dsn, key) as one, _open(root, dsn, key) as two:
        _fill(one)
        one.search("bread", mode="hybrid")
        assert one.retrieval.pg is not None and two.retrieval.pg is not None
        model = one.retrieval.vector_index().model
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as holder, holder.transaction():
            holder.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"memdir:store:{key}",))
            finished: list[float] = []
            worker = threading.Thread(
                target=lambda: (two.retrieval.pg.rebuild(two.index, model), finished.append(1))  # type: ignore[union-attr]
            )
            worker.start()
            time.sleep(0.5)
            assert not finished  # the second writer waits for the lock
            # A search neither waits nor fails: it reads the rows as they are.
            one.write("notes/new.md", "# New\n\nA brand new loaf.\n")
            stats = one.retrieval.pg.sync(one.index, None)
            assert stats.skipped
            assert one.search("bread", mode="bm25")
        worker.join(30)
        assert finished
        pg = two.retrieval.pg
        assert pg.count() == _markdown_files(root)
        query = "loaf bread"
        assert _ranked(one, query, mode="hybrid") == _ranked(two, query, mode="hybrid")


def test_two_processes_rebuild_at_once_without_corruption(
    tmp_path: Path, dsn: str, toy: None
) -> None:
    root = Store.init(tmp_path / "store", git=False)
    key = f"procs{next(_names)}"
    with _open(root, None) as mem:
        for i in range(60):
            mem.write(f"n/{i}.md", f"# Note {i}\n\nword{i % 7} shared text number {i}.\n")
    script = (
        "import sys; from memdir.service import Memory\n"
        "m = Memory.open(sys.argv[1], overrides={'store': {'git_commit': False}, 'embeddings': "
        "{'enabled': False}, 'index': {'engine': 'postgres', 'dsn': sys.argv[2], 'store': "
        "sys.argv[3]}})\n"
        "for _ in range(3):\n    m.reindex(full=True)\n"
        "print(len(m.search('shared', mode='bm25', limit=100)))\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(root), dsn, key], stdout=subprocess.PIPE
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].decode().strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs == ["60", "60"]
    with _open(root, dsn, key, embeddings={"enabled": False}) as mem:
        pg = mem.retrieval.pg
        assert pg is not None and pg.count() == _markdown_files(root)
        with pg._session() as conn:
            dup = conn.execute(
                "SELECT count(*) FROM (SELECT path FROM memdir_terms WHERE store = %s "
                "GROUP BY kind, term, path HAVING count(*) > 1) x",
                (key,),
            ).fetchone()
        assert dup is not None and dup[0] == 0


@pytest.fixture
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A server of this test alone (it is stopped and started again)."""
    pytest.importorskip("psycopg")
    from memdir.index import pglocal

    try:
        server = pglocal.start()
    except RuntimeError as exc:
        pytest.skip(f"no PostgreSQL with pgvector: {exc}")
    yield server
    server.remove()


def test_a_server_that_goes_away_and_comes_back(tmp_path: Path, own_server: Any, toy: None) -> None:
    root = Store.init(tmp_path / "store", git=False)
    dsn = own_server.dsn
    with _open(root, dsn, "outage") as mem:
        _fill(mem)
        assert mem.search("violin", mode="hybrid")
        own_server.stop("immediate")
        with pytest.raises(IndexUnavailable, match="cannot be reached"):
            mem.search("violin", mode="bm25")
        # A write needs no Postgres: acknowledged, on disk, and found once it is back.
        mem.write("notes/during.md", "# During\n\nWritten while the database was down.\n")
        assert (root / "notes" / "during.md").is_file()
        env = {
            "MEMDIR_INDEX_ENGINE": "postgres",
            "MEMDIR_INDEX_DSN": dsn,
            "MEMDIR_INDEX_STORE": "outage",
            "MEMDIR_EMBEDDINGS_ENABLED": "false",
            "MEMDIR_STORE_GIT_COMMIT": "false",
        }
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "memdir",
                "--root",
                str(root),
                "search",
                "violin",
                "--mode",
                "bm25",
            ],
            check=False,
            capture_output=True,
            text=True,
            env={**_env(), **env},
            timeout=60,
        )
        assert done.returncode != 0
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "cannot be reached" in lines[0], done.stderr
        assert "Traceback" not in done.stderr
        own_server.restart()
        found = [h.path for h in mem.search("database down", mode="bm25")]
        assert found[0] == "notes/during.md"


def test_http_answers_503_while_the_database_is_away(tmp_path: Path, own_server: Any) -> None:
    root = Store.init(tmp_path / "store", git=False)
    env = {
        "MEMDIR_INDEX_ENGINE": "postgres",
        "MEMDIR_INDEX_DSN": own_server.dsn,
        "MEMDIR_INDEX_STORE": "http",
        "MEMDIR_STORE_GIT_COMMIT": "false",
        "MEMDIR_INDEX_CONNECT_TIMEOUT_SECONDS": "2",
    }
    proc, url = serve_process(root, tmp_path / "serve.log", **env)
    try:
        put = httpx.put(f"{url}/v1/files/notes/a.md", json={"content": "# A\n\nThe kiln.\n"})
        assert put.status_code in (200, 201), put.text
        assert httpx.get(f"{url}/v1/search", params={"q": "kiln"}).json()
        own_server.stop("immediate")
        down = httpx.get(f"{url}/v1/search", params={"q": "kiln"}, timeout=30)
        assert down.status_code == 503
        error = down.json()["error"]
        assert error["code"] == "index_unavailable" and "cannot be reached" in error["message"]
        put = httpx.put(f"{url}/v1/files/notes/b.md", json={"content": "# B\n\nThe kiln b.\n"})
        assert put.status_code in (200, 201), put.text  # files first: acknowledged
        own_server.restart()
        back = httpx.get(f"{url}/v1/search", params={"q": "kiln"}, timeout=30)
        assert back.status_code == 200
        assert {r["path"] for r in back.json()} == {"notes/a.md", "notes/b.md"}
    finally:
        proc.terminate()
        proc.wait(30)


def _markdown_files(root: Path) -> int:
    """How many documents the store holds: its markdown files outside dot folders."""
    return sum(
        1
        for p in root.rglob("*.md")
        if not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def _env() -> dict[str, str]:
    import os

    out = dict(os.environ)
    out.pop("MEMDIR_ROOT", None)
    return out
