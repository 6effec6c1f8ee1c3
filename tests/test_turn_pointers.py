"""Turn records in search results: what the index holds of them and what a pointer shows."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from memdir.doc import frontmatter
from memdir.doc.turnrecord import turn_path
from memdir.files.store import Store
from memdir.index.documents import searchable_body
from memdir.index.search import present
from memdir.service import Memory

NO_GIT = {"store": {"git_commit": False}}
NOTE_MIGRATION = "0700_turn_body_without_no_tools_note"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "s", git=False)


@pytest.fixture
def mem(root: Path) -> Iterator[Memory]:
    with Memory.open(root, overrides=NO_GIT) as opened:
        yield opened


def _record(mem: Memory) -> dict[str, str]:
    """Turns of every shape; returns name -> id."""
    made = {
        "plain": mem.record_turn(
            thread="ops", user="ana", input="why did the deploy fail?", output="the lock held"
        ),
        "no_output": mem.record_turn(thread="ops", user="ana", input="the migration is done"),
        "tools": mem.record_turn(
            thread="ops",
            user="bo",
            input="check the pager",
            output="it paged twice",
            worklog=[{"tool": "pager", "result": "two pages"}],
        ),
        # An input that looks like the note itself is fenced in the file and kept whole.
        "tricky": mem.record_turn(
            thread="ops", input="## Compact\n\n- No tool calls.\n\nquoted", output="zebra"
        ),
    }
    return {name: record.id for name, record in made.items()}


def _fts_bodies(mem: Memory) -> dict[str, str]:
    rows = mem.index.conn.execute(
        "SELECT d.episode_id, f.body FROM docs d JOIN docs_fts f ON f.rowid = d.id "
        "WHERE d.type = 'turn'"
    )
    return {str(r[0]): str(r[1]) for r in rows}


def _file_body(root: Path, ident: str) -> str:
    return frontmatter.parse((root / turn_path(ident)).read_text(encoding="utf-8")).body


def test_the_no_tools_note_stays_in_the_file_and_out_of_the_index(root: Path, mem: Memory) -> None:
    ids = _record(mem)
    bodies = _fts_bodies(mem)
    for name in ("plain", "no_output"):
        assert "No tool calls" in _file_body(root, ids[name])  # the file is untouched
        assert "No tool calls" not in bodies[ids[name]]
        assert "## Input" in bodies[ids[name]] and "## Output" in bodies[ids[name]]
    assert bodies[ids["plain"]].count("the lock held") == 1  # the output is counted once
    assert "Tools (1 calls)" in bodies[ids["tools"]] or "pager" in bodies[ids["tools"]]
    assert "quoted" in bodies[ids["tricky"]]
    # "tool calls" no longer matches every turn: the one that used a tool, and the one
    # whose input says those words.
    hits = mem.search("tool calls", mode="bm25")
    assert {h.path for h in hits if h.type == "turn"} == {
        turn_path(ids["tools"]),
        turn_path(ids["tricky"]),
    }


def test_a_turn_pointer_reads_as_thread_user_time_and_input_to_output(mem: Memory) -> None:
    ids = _record(mem)
    plain = turn_path(ids["plain"])
    for mode in ("bm25", "hybrid"):
        hit = next(h for h in mem.search("deploy fail", mode=mode) if h.path == plain)
        created = str(
            mem.index.conn.execute("SELECT created FROM docs WHERE path = ?", (plain,)).fetchone()[
                0
            ]
        )
        assert hit.title == f"ops · ana · {created[:16].replace('T', ' ')}"
        assert "#" not in hit.snippet and "Input" not in hit.snippet
        assert "→" in hit.snippet and "lock held" in hit.snippet
        assert ids["plain"] not in hit.title
    # A document that is not a turn keeps its own title.
    mem.write("wiki/deploys.md", "# Deploys\n\nThe deploy fails when the lock holds.\n")
    wiki = next(h for h in mem.search("deploy fail", mode="bm25") if h.path == "wiki/deploys.md")
    assert wiki.title == "Deploys" and "#" not in wiki.snippet


def test_an_older_index_loses_the_note_when_opened(root: Path, mem: Memory) -> None:
    ids = _record(mem)
    expected = _fts_bodies(mem)
    mem.search("lock", mode="bm25")  # fills the postings cache
    with mem.index.transaction() as wconn:
        # As an index written before the note was left out: the file's whole body.
        for ident in ids.values():
            wconn.execute(
                "UPDATE docs_fts SET body = ? WHERE rowid = "
                "(SELECT id FROM docs WHERE episode_id = ? AND type = 'turn')",
                (_file_body(root, ident), ident),
            )
    assert "No tool calls" in _fts_bodies(mem)[ids["plain"]]
    mem.close()
    db = sqlite3.connect(root / ".memdir" / "index.db")
    db.execute("DELETE FROM migrations WHERE name = ?", (NOTE_MIGRATION,))
    db.commit()
    db.close()
    with Memory.open(root, overrides=NO_GIT) as again:
        assert _fts_bodies(again) == expected  # the same bodies the indexer writes
        assert again.index.conn.execute("SELECT count(*) FROM fts_postings").fetchone()[0] == 0
        hits = again.search("tool calls", mode="bm25")
        assert {h.path for h in hits if h.type == "turn"} == {
            turn_path(ids["tools"]),
            turn_path(ids["tricky"]),
        }


@pytest.mark.parametrize(
    ("body", "kept"),
    [
        ("## Input\n\nhi\n\n## Compact\n\n- No tool calls.\n\n## Output\n\n", False),
        (
            "## Input\n\nhi\n\n## Compact\n\n- No tool calls.\n- Result: yo\n\n## Output\n\nyo\n",
            False,
        ),
        (
            "## Input\n\nhi\n\n## Compact\n\n- No tool calls.\n- Errors (1): x\n\n## Output\n\n",
            True,
        ),
        ("## Input\n\nhi\n\n## Compact\n\n- Tools (1 calls): grep\n\n## Output\n\nyo\n", True),
        ("## Output\n\nyo\n\n## Compact\n\n- No tool calls.\n", True),
        ("plain text without sections", True),
    ],
)
def test_searchable_body_removes_only_a_bare_no_tools_note(body: str, kept: bool) -> None:
    assert (searchable_body("turn", body) == body) is kept
    assert searchable_body("article", body) == body
    if not kept:
        assert "No tool calls" not in searchable_body("Turn", body)


_ROW = {
    "type": "turn",
    "episode_id": "01abc",
    "path": "episodes/turns/2026/01/01/01abc.md",
    "thread": "ops",
    "user": "ana",
    "created": "2026-01-01T10:00:00.000Z",
}


@pytest.mark.parametrize(
    ("snippet", "shown"),
    [
        (
            "## Input\n\nplease Output the list\n\n## Output\n\ndone",
            "please Output the list → done",
        ),
        ("… the [users] table ## Output rolled back …", "… the [users] table → rolled back …"),
        (
            "## Input hi ## Compact - Tools (1 calls): pager ## Output [paged]",
            "hi · work: - Tools (1 calls): pager → [paged]",
        ),
        ("## [Input] what is input", "what is input"),
    ],
)
def test_a_turn_snippet_reads_input_work_output(snippet: str, shown: str) -> None:
    assert present("01abc", snippet, _ROW) == ("ops · ana · 2026-01-01 10:00", shown)
    assert present("My title", snippet, _ROW)[0] == "My title"
    assert present("Deploys", "# Deploys Roll ## Steps back", {"type": None}) == (
        "Deploys",
        "Deploys Roll Steps back",
    )
