"""Syncs of more than one batch (1000 files each) index every file, in one connection."""

from __future__ import annotations

from pathlib import Path

from memdir.index import Index


def test_a_multi_batch_sync_indexes_everything(tmp_path: Path) -> None:
    root = tmp_path / "store"
    for i in range(2100):  # three batches: 1000, 1000 and 100
        folder = root / "notes" / f"d{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"n{i:04d}.md").write_text(
            f"---\nid: n{i:04d}\ntype: note\n---\n# Note {i}\n\n"
            f"word{i} shared text [[n{i + 1:04d}]]\n",
            encoding="utf-8",
        )
    index = Index(root)
    try:
        stats = index.sync()
        assert (stats.added, stats.updated, stats.scanned) == (2100, 0, 2100)
        conn = index.conn
        assert conn.execute("SELECT count(*) FROM docs").fetchone()[0] == 2100
        assert conn.execute("SELECT count(*) FROM docs_fts").fetchone()[0] == 2100
        row = conn.execute(
            "SELECT d.path, d.episode_id FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid "
            "WHERE docs_fts MATCH 'word2099'"
        ).fetchone()
        assert tuple(row) == ("notes/d6/n2099.md", "n2099")
        links = conn.execute("SELECT count(*) FROM links WHERE kind = 'wikilink'").fetchone()[0]
        assert links == 2100
        assert index.compare().in_step

        # A second large change (rewrite 1100 files) updates in place; nothing is added.
        for i in range(1100):
            path = root / "notes" / f"d{i % 7}" / f"n{i:04d}.md"
            path.write_text(path.read_text(encoding="utf-8") + "edited\n", encoding="utf-8")
        again = index.sync()
        assert (again.added, again.updated) == (0, 1100)
        assert index.compare().in_step
    finally:
        index.close()
