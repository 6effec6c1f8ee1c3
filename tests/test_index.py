"""The derived index: in step with the files, rebuildable, searchable with any string."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memdir.errors import InvalidInput, InvalidQuery, NotFound
from memdir.service import Memory


def bm25(mem: Memory, query: str, **kw: object) -> list[str]:
    return [h.path for h in mem.search(query, mode="bm25", **kw)]  # type: ignore[arg-type]


def page(title: str, body: str, **fm: str) -> str:
    lines = ["---", f"title: {title}"] + [f"{k}: {v}" for k, v in fm.items()] + ["---", body, ""]
    return "\n".join(lines)


@pytest.fixture
def filled(mem: Memory) -> Memory:
    mem.write(
        "wiki/ops/rollback.md",
        page(
            "Rollback",
            "Revert the deploy with the blue switch.",
            type="concept",
            memory_kind="semantic",
        ),
    )
    mem.write(
        "wiki/ops/canary.md",
        page(
            "Canary",
            "Send one percent of traffic first.",
            type="concept",
            memory_kind="semantic",
            owner="sre",
        ),
    )
    mem.write(
        "episodes/run-1.md",
        page("Run 1", "The deploy failed and we did a rollback.", type="run", episode_id="run-1"),
    )
    return mem


def test_search_returns_pointers_with_snippets(filled: Memory) -> None:
    hits = filled.search("rollback", mode="bm25")
    assert [h.path for h in hits][:2] == ["wiki/ops/rollback.md", "episodes/run-1.md"]
    assert hits[0].title == "Rollback"
    assert "[" in hits[1].snippet and "rollback" in hits[1].snippet.lower()
    assert hits[0].score > hits[1].score
    assert not hasattr(hits[0], "content")


def test_search_filters(filled: Memory) -> None:
    assert bm25(filled, "deploy", kind="semantic") == ["wiki/ops/rollback.md"]
    assert bm25(filled, "deploy", type="RUN") == ["episodes/run-1.md"]
    assert bm25(filled, "traffic", where=["owner=sre"]) == ["wiki/ops/canary.md"]
    assert bm25(filled, "traffic", where=["owner=dev"]) == []
    assert bm25(filled, "deploy", path_prefix="episodes/") == ["episodes/run-1.md"]
    assert len(bm25(filled, "deploy OR traffic OR rollback", limit=1)) == 1
    with pytest.raises(InvalidInput):
        filled.search("deploy", where=["novalue"])
    with pytest.raises(InvalidInput):
        filled.search("deploy", limit=0)


@given(st.text(max_size=40))
@settings(max_examples=150, deadline=None)
def test_any_user_string_is_a_valid_query(query: str) -> None:
    from memdir.index.search import fts_query

    try:
        fts_query(query)
    except InvalidQuery:
        assert not any(ch.isalnum() or ch == "_" for ch in query)


@pytest.mark.parametrize(
    "query", ['"unbalanced', "a:b", "deploy AND", "roll*", "(blue", "blue-switch", "NEAR(", "^x"]
)
def test_fts_syntax_never_leaks(filled: Memory, query: str) -> None:
    assert isinstance(filled.search(query), list)


def test_empty_query_is_a_clear_error(filled: Memory) -> None:
    with pytest.raises(InvalidQuery, match="no searchable words"):
        filled.search("  ?! ")


def test_hidden_zones_are_never_returned(filled: Memory) -> None:
    root = filled.root
    for rel in ("quarantine/x.md", ".obsidian/x.md", "notes/.drafts/x.md", "notes/quarantine.md"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("# Zebra\n\nzebra stripes\n")
    assert bm25(filled, "zebra") == ["notes/quarantine.md"]
    for mode in ("vector", "hybrid"):
        found = {h.path for h in filled.search("zebra stripes", mode=mode, limit=50)}
        assert "notes/quarantine.md" in found
        assert not found & {"quarantine/x.md", ".obsidian/x.md", "notes/.drafts/x.md"}, mode
    assert [h.path for h in filled.grep("zebra")] == ["notes/quarantine.md"]
    assert "quarantine/x.md" not in [r["path"] for r in filled.ls()]


def test_hand_edits_and_deletions_are_picked_up(filled: Memory) -> None:
    target = filled.root / "wiki/ops/canary.md"
    target.write_text(page("Canary", "Now about giraffes.", type="concept"))
    os.utime(target, ns=(time.time_ns(), time.time_ns() + 5_000_000))
    assert bm25(filled, "giraffes") == ["wiki/ops/canary.md"]
    (filled.root / "wiki/ops/rollback.md").unlink()
    assert bm25(filled, "blue switch") == []


def test_git_checkout_is_picked_up(filled: Memory) -> None:
    root = filled.root
    target = root / "wiki/ops/canary.md"
    target.write_text(page("Canary", "Temporary text about walruses.", type="concept"))
    assert bm25(filled, "walruses") == ["wiki/ops/canary.md"]
    subprocess.run(["git", "-C", str(root), "checkout", "--", "wiki/ops/canary.md"], check=True)
    assert bm25(filled, "walruses") == []
    assert bm25(filled, "traffic") == ["wiki/ops/canary.md"]


def test_noop_sync_reads_nothing(filled: Memory) -> None:
    filled.sync()
    stats = filled.sync()
    assert stats.scanned >= 3 and stats.changed == 0 and stats.touched == 0


def test_touch_without_change_is_not_reparsed(filled: Memory) -> None:
    filled.sync()
    target = filled.root / "wiki/ops/canary.md"
    os.utime(target, ns=(time.time_ns(), time.time_ns() + 9_000_000))
    stats = filled.sync()
    assert stats.touched == 1 and stats.changed == 0


def test_deleting_the_index_loses_nothing(filled: Memory) -> None:
    before = [(h.path, h.title) for h in filled.search("deploy traffic rollback", mode="bm25")]
    report_before = filled.memory_report()
    filled.index.close()
    for suffix in ("", "-wal", "-shm"):
        Path(str(filled.index.path) + suffix).unlink(missing_ok=True)
    after = filled.search("deploy traffic rollback", mode="bm25")
    assert [(h.path, h.title) for h in after] == before
    assert filled.memory_report().total_unmerged == report_before.total_unmerged
    assert filled.doctor().ok


def test_doctor_finds_every_kind_of_difference(filled: Memory) -> None:
    filled.sync()
    assert filled.doctor().ok
    root = filled.root
    (root / "notes").mkdir()
    (root / "notes/new.md").write_text("# New\n")
    (root / "wiki/ops/canary.md").write_text("# changed\n")
    (root / "wiki/ops/rollback.md").unlink()
    (root / "notes/bad.md").write_text("---\ntitle: [oops\n---\nbody\n")
    report = filled.doctor().to_dict()
    assert report["ok"] is False
    assert report["missing_in_index"] == ["notes/bad.md", "notes/new.md"]
    assert report["missing_on_disk"] == ["wiki/ops/rollback.md"]
    assert report["stale"] == ["wiki/ops/canary.md"]
    assert [i["path"] for i in report["invalid_yaml"]] == ["notes/bad.md"]
    filled.sync()
    assert filled.doctor().ok


def test_reindex_full_rebuilds(filled: Memory) -> None:
    stats = filled.reindex(full=True)
    assert stats.added >= 3
    assert filled.doctor().ok


def test_link_graph_and_columns(filled: Memory) -> None:
    filled.write(
        "wiki/ops/index.md",
        "---\ntitle: Ops\nrelated: [/ops/canary.md]\ncontradicts: '[[rollback]]'\n"
        "supersedes: [old]\nmerged-from:\n  - {type: run, id: run-1}\n---\n"
        "See [[rollback|the rollback]] and [canary](canary.md). `[[not-a-link]]`\n"
        "```\n[[nor-this]]\n```\n",
    )
    rows = filled.index.conn.execute(
        "SELECT kind, target FROM links l JOIN docs d ON d.id = l.src "
        "WHERE d.path = 'wiki/ops/index.md' ORDER BY kind, target"
    ).fetchall()
    assert [tuple(r) for r in rows] == [
        ("contradicts", "rollback"),
        ("markdown", "canary.md"),
        ("merged-from", "run:run-1"),
        ("related", "/ops/canary.md"),
        ("supersedes", "old"),
        ("wikilink", "rollback"),
    ]


def test_read_and_sections(filled: Memory) -> None:
    filled.write(
        "notes/s.md", "# Top\n\nintro\n\n## Steps\n\none\n\n### Sub\n\ntwo\n\n## End\n\nx\n"
    )
    assert filled.read("notes/s.md").content.startswith("# Top")
    section = filled.read("notes/s.md", section="steps").content
    assert "one" in section and "two" in section and "x" not in section
    with pytest.raises(NotFound):
        filled.read("notes/s.md", section="Missing")
    with pytest.raises(NotFound):
        filled.read("notes/nope.md")


def test_merge_is_idempotent_and_forget_hides(filled: Memory) -> None:
    first = filled.merge("wiki/ops/rollback.md", episode="run-1", type="run", actor="op")
    again = filled.merge("wiki/ops/rollback.md", episode=" run-1 ", type="RUN")
    assert first["added"] is True and again["added"] is False
    report = filled.memory_report()
    assert report.total_unmerged == 0
    filled.forget("wiki/ops/canary.md", reason="replaced")
    assert bm25(filled, "traffic") == []
    for mode in ("bm25", "vector", "hybrid"):
        found = [h.path for h in filled.search("traffic", mode=mode)]
        assert "wiki/ops/canary.md" not in found, mode
    assert bm25(filled, "traffic", include_superseded=True) == ["wiki/ops/canary.md"]
    text = (filled.root / "wiki/ops/canary.md").read_text()
    assert "memory_status: superseded" in text and "Send one percent" in text
    filled.forget("wiki/ops/canary.md", purge=True)
    assert not (filled.root / "wiki/ops/canary.md").exists()
    count = filled.index.conn.execute(
        "SELECT count(*) FROM docs WHERE path = 'wiki/ops/canary.md'"
    ).fetchone()[0]
    assert count == 0
    with pytest.raises(InvalidInput):
        filled.merge("wiki/ops/rollback.md")


def test_a_search_walks_the_files_once(filled: Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = filled.index.sync

    def counting(*, full: bool = False) -> object:
        calls.append(1)
        return real(full=full)

    monkeypatch.setattr(filled.index, "sync", counting)
    for mode in ("bm25", "auto", "hybrid"):
        calls.clear()
        filled.search("rollback", mode=mode)
        assert len(calls) == 1, mode
    filled.sync()
    assert len(calls) == 2  # outside a search, sync is not held


def test_a_where_filter_with_a_list_or_mapping_value_is_invalid_input(store_root: Path) -> None:
    mem = Memory.open(
        store_root, overrides={"store": {"git_commit": False}, "embeddings": {"enabled": False}}
    )
    mem.write("notes/a.md", "---\ntags: [deploy, ops]\n---\n# Deploy\n\nShip it.\n")
    assert [h.path for h in mem.search("deploy", where={"tags": "ops"})] == ["notes/a.md"]
    for value in (["deploy", "ops"], {"name": "deploy"}):
        with pytest.raises(InvalidInput, match="'tags' needs one value"):
            mem.search("deploy", where={"tags": value})


def test_a_held_sync_holds_for_the_verbs_built_after_it(filled: Memory) -> None:
    """A hook holds the sync before any document verb exists (so a pack never builds them);
    the verbs built later still answer from the index as it stands until a forced sync."""
    root = filled.root
    filled.close()
    (root / "wiki" / "ops" / "flags.md").write_text(page("Flags", "Feature flags gate it."))
    with Memory.open(root) as mem:
        mem.hold_sync()
        assert mem.sync().changed == 0
        assert bm25(mem, "flags") == []
        assert "wiki/ops/flags.md" in mem.sync(force=True).changed_paths
        assert bm25(mem, "flags") == ["wiki/ops/flags.md"]
