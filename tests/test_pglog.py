"""The local index's change log for the Postgres engine (memdir.index.pglog), without Postgres."""

from __future__ import annotations

from pathlib import Path

from helpers import write_turn_page
from memdir.files.store import Store
from memdir.index import pglog
from memdir.service import Memory


def _open(root: Path) -> Memory:
    overrides = {"store": {"git_commit": False}, "embeddings": {"provider": "letters"}}
    return Memory.open(root, overrides=overrides)


def test_nothing_is_logged_until_the_engine_turns_the_log_on(tmp_path: Path, toy: None) -> None:
    root = Store.init(tmp_path / "s", git=False)
    with _open(root) as mem:
        mem.write("a.md", "# A\n\nThe kettle is descaled with vinegar.\n")
        assert pglog.top(mem.index.conn) == (None, 0)
        with mem.index.transaction() as tx:
            epoch = pglog.enable(tx)
        with mem.index.transaction() as tx:
            assert pglog.enable(tx) == epoch  # on already: the same epoch
        start = pglog.top(mem.index.conn)[1]
        mem.write("b.md", "# B\n\nThe teapot is warmed first.\n")
        mem.write("a.md", "# A\n\nThe kettle is descaled with lemon.\n")
        assert pglog.since(mem.index.conn, start) == ["a.md", "b.md"]
        top = pglog.top(mem.index.conn)
        assert top[0] == epoch and top[1] > start
        mem.write("a.md", "# A\n\nThe kettle is descaled with lemon.\n")  # the same bytes
        assert pglog.top(mem.index.conn) == top


def test_vectors_and_thread_neighbours_are_logged(tmp_path: Path, toy: None) -> None:
    root = Store.init(tmp_path / "s", git=False)
    with _open(root) as mem:
        for i, said in enumerate(["Which bread?", "Rye bread.", "Nice."]):
            write_turn_page(mem, f"t/{i}.md", "s1", "ann", f"2023-06-03T10:00:0{i}Z", said)
        mem.search("bread", mode="hybrid")
        with mem.index.transaction() as tx:
            pglog.enable(tx)
        seq = pglog.top(mem.index.conn)[1]
        # The middle turn changes: its chunks and passage, and the next turn's passage
        # (its context is the previous turn's words) must be pushed again.
        write_turn_page(mem, "t/1.md", "s1", "ann", "2023-06-03T10:00:01Z", "Spelt bread.")
        assert pglog.since(mem.index.conn, seq) == ["t/1.md"]
        seq = pglog.top(mem.index.conn)[1]
        mem.search("bread", mode="hybrid")  # the vector sync: chunks, vectors, passages
        assert set(pglog.since(mem.index.conn, seq)) == {"t/1.md", "t/2.md"}
        # A local rebuild empties the log: the engine then rebuilds the store's rows.
        mem.reindex(full=True)
        assert pglog.top(mem.index.conn) == (None, 0)
