"""The meaning router's vectors kept on disk: a second run embeds only what changed, and a
cache that is corrupt, shared, a symlink or of another model never gives a wrong vector."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memdir.engine import meaning
from memdir.files.store import Store
from memdir.index import routevectors as vectorcache
from memdir.service import Memory


class Counting:
    """An embedder with a model id that records every text it embeds (a stable vector per
    text, so a vector read back can be compared with the one embedded)."""

    def __init__(self, model_id: str = "fake-model", dim: int = 8) -> None:
        self.model_id = model_id
        self.dim = dim
        self.seen: list[str] = []

    def embed(self, texts: Sequence[str]) -> Any:
        self.seen.extend(texts)
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(f"{self.model_id}\0{t}".encode()).digest()[:4])
            v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.array(rows, dtype=np.float32).reshape(len(texts), self.dim)


@pytest.fixture(autouse=True)
def _fresh_process_cache() -> None:
    meaning._MEMBERS.clear()


def test_a_second_process_reads_the_vectors_instead_of_embedding(tmp_path: Path) -> None:
    model = Counting()
    texts = ["article one", "article two", "article three"]
    first = meaning.cached(model.embed, texts, vectorcache.VectorCache(tmp_path / "v.db"))
    assert sorted(model.seen) == sorted(texts)
    meaning._MEMBERS.clear()  # as a new process starts
    model.seen.clear()
    again = vectorcache.VectorCache(tmp_path / "v.db")
    second = meaning.cached(model.embed, [*texts, "article four (new)"], again)
    assert model.seen == ["article four (new)"]
    for a, b in zip(first, second[:3], strict=True):
        assert np.array_equal(a, b)
    assert (again.hits, again.misses) == (3, 1)


def test_another_model_does_not_get_the_stored_vectors(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    meaning.cached(Counting("model-a").embed, ["same text"], vectorcache.VectorCache(path))
    meaning._MEMBERS.clear()
    other = Counting("model-b", dim=4)
    [vec] = meaning.cached(other.embed, ["same text"], vectorcache.VectorCache(path))
    assert other.seen == ["same text"] and vec.shape == (4,)


def test_a_corrupt_cache_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    path.write_bytes(b"this is not a database\x00" * 100)
    model = Counting()
    disk = vectorcache.VectorCache(path)
    [vec] = meaning.cached(model.embed, ["text"], disk)
    assert model.seen == ["text"] and disk.broken
    assert np.allclose(vec, Counting().embed(["text"])[0])


def test_a_symlinked_cache_file_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.db"
    target.write_bytes(b"")
    link = tmp_path / "cache" / "v.db"
    link.parent.mkdir()
    link.symlink_to(target)
    disk = vectorcache.VectorCache(link)
    meaning.cached(Counting().embed, ["text"], disk)
    assert disk.broken and target.read_bytes() == b""


def test_two_writers_at_once_both_land(tmp_path: Path) -> None:
    path = tmp_path / "v.db"
    errors: list[str] = []

    def write(prefix: str) -> None:
        disk = vectorcache.VectorCache(path)
        model = Counting()
        for i in range(20):
            texts = [f"{prefix} {i} {k}" for k in range(5)]
            disk.put(model.model_id, list(zip(texts, model.embed(texts), strict=True)))
        if disk.broken:
            errors.append(disk.broken)
        disk.close()

    threads = [threading.Thread(target=write, args=(p,)) for p in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    texts = [f"{p} {i} {k}" for p in "ab" for i in range(20) for k in range(5)]
    assert len(vectorcache.VectorCache(path).get("fake-model", texts)) == len(texts)


def test_consolidate_keeps_article_vectors_for_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = Counting()
    monkeypatch.setattr(meaning, "embedder_for", lambda *a, **k: (model.embed, ""))
    root = Store.init(tmp_path / "store")
    mem = Memory.open(root)
    scope = "Keeping honey bees in two hives"
    mem.bundle_add("bees", scope)
    first = tmp_path / "hive.md"
    first.write_text("# Hive check\n\nOpened both hives, the bees are calm and honey is in.\n")
    mem.ingest([("hive.md", first.read_text())])
    mem.consolidate()
    assert (root / ".memdir" / "cache" / vectorcache.FILE).is_file()
    assert scope in model.seen
    for name, text in [
        ("swarm.md", "# Swarm\n\nThe bees swarmed from the left hive to a tree.\n"),
        ("varroa.md", "# Mites\n\nCounted the varroa drop on the tray under each hive.\n"),
    ]:
        meaning._MEMBERS.clear()  # a new process
        model.seen.clear()
        mem.ingest([(name, text)])
        mem.consolidate()
        assert any(text.split("\n")[-2][:20] in t for t in model.seen)  # the new source
        assert scope not in model.seen  # the scope came from the cache
    # The first note's article was routed against by the second run: the third reads it.
    assert not [t for t in model.seen if t.startswith("Hive check\n")]


def test_a_cache_opened_while_another_opener_writes_waits(tmp_path: Path) -> None:
    # Switching a new file to WAL needs it alone; SQLite says "locked" at once, not after
    # the timeout, so the cache retries instead of giving up for the whole run.
    path = tmp_path / "v.db"
    opener = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    opener.execute("CREATE TABLE other (a)")  # the file exists, still in rollback mode
    opener.execute("BEGIN IMMEDIATE")  # another opener, part way through its own first write
    opener.execute("INSERT INTO other VALUES (1)")
    threading.Timer(0.3, lambda: opener.execute("COMMIT")).start()
    disk = vectorcache.VectorCache(path)
    model = Counting()
    disk.put(model.model_id, list(zip(["a"], model.embed(["a"]), strict=True)))
    assert not disk.broken
    assert list(disk.get(model.model_id, ["a"])) == ["a"]
    disk.close()
    opener.close()
