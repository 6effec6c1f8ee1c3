"""The quarantine queue: listing what consolidate could not file, and releasing a source
into the bundle a person names, which the next consolidate then files there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import BREAD, git, run_cli
from memdir.doc import frontmatter
from memdir.errors import InvalidInput, NotFound, UnsafePath
from memdir.files.store import Store
from memdir.service import Memory

VAT = ("vat.md", "The quarterly VAT return is due a month after the quarter ends.\n")


@pytest.fixture
def qmem(tmp_path: Path) -> Iterator[Memory]:
    root = Store.init(tmp_path / "store")
    mem = Memory.open(root, overrides={"embeddings": {"enabled": False}})
    mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, oven")
    mem.bundle_add("money", "household money: bills and budget")
    mem.ingest([VAT, ("bread.md", BREAD)])
    mem.consolidate()
    yield mem
    mem.close()


def test_list_shows_each_quarantined_source_with_its_reason(qmem: Memory) -> None:
    [entry] = qmem.quarantine_list()
    assert entry["path"].startswith("quarantine/") and entry["path"].endswith("-vat.md")
    assert "no bundle scope fits" in entry["reason"]
    assert set(entry["scores"]) == {"kitchen", "money"}
    done = run_cli("quarantine", "list", "--json", cwd=qmem.root)
    assert done.returncode == 0 and json.loads(done.stdout) == [entry]


def test_a_released_source_is_filed_into_the_named_bundle(qmem: Memory) -> None:
    [entry] = qmem.quarantine_list()
    done = qmem.quarantine_release(entry["path"], bundle="money", topic="Tax", actor="ana")
    assert done["path"].startswith("inbox/") and not (qmem.root / entry["path"]).exists()
    fm = frontmatter.parse((qmem.root / done["path"]).read_text()).fm
    assert (fm["bundle"], fm["topic"]) == ("money", "tax")
    assert "quarantine_reason" not in fm and "route_scores" not in fm
    assert qmem.quarantine_list() == []
    assert "Author: ana" in git(qmem.root, "log", "-1", "--format=Author: %an")
    filed = qmem.consolidate()["articles"]
    assert [a.split("/")[1:3] for a in filed] == [["money", "tax"]]


def test_release_refuses_what_is_not_a_quarantined_source(qmem: Memory) -> None:
    [entry] = qmem.quarantine_list()
    with pytest.raises(NotFound, match="no bundle named 'garden'"):
        qmem.quarantine_release(entry["path"], bundle="garden")
    with pytest.raises(InvalidInput, match="only a quarantined source"):
        qmem.quarantine_release("wiki/index.md", bundle="money")
    with pytest.raises(NotFound, match="no quarantined source"):
        qmem.quarantine_release("quarantine/none.md", bundle="money")
    with pytest.raises(UnsafePath):
        qmem.quarantine_release("../outside.md", bundle="money")
    assert [e["path"] for e in qmem.quarantine_list()] == [entry["path"]]


def test_the_api_lists_and_releases_for_an_unconfined_writer(qmem: Memory) -> None:
    from http_server import live_server

    root = qmem.root
    made = run_cli("token", "create", "w", "--scope", "write", "--json", cwd=root)
    narrow = run_cli(
        "token", "create", "n", "--scope", "write", "--prefix", "inbox/", "--json", cwd=root
    )
    token, confined = (json.loads(r.stdout)["token"] for r in (made, narrow))
    with live_server(root, {"store": {"git_commit": False}}) as live:
        with live.client(confined) as c:
            assert c.get("/v1/quarantine").status_code == 403
        with live.client(token) as c:
            [entry] = c.get("/v1/quarantine").json()
            done = c.post("/v1/quarantine/release", json={"path": entry["path"], "bundle": "money"})
            assert done.status_code == 200, done.text
            assert done.json()["path"].startswith("inbox/")
            assert c.get("/v1/quarantine").json() == []


def test_two_releases_at_once_file_the_source_once(qmem: Memory) -> None:
    import threading

    [entry] = qmem.quarantine_list()
    outcomes: list[str] = []

    def release() -> None:
        try:
            qmem.quarantine_release(entry["path"], bundle="money")
            outcomes.append("released")
        except NotFound:
            outcomes.append("not found")

    threads = [threading.Thread(target=release) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["not found"] * 3 + ["released"]
    assert len(list((qmem.root / "inbox").glob("*vat*.md"))) == 1
