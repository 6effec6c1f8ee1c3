"""A document memdir reads can always be forgotten, merged into and given provenance.

Frontmatter is read by PyYAML and changed in place by ruamel.yaml (which keeps comments
and formatting). Where ruamel.yaml cannot read what PyYAML reads (a tab after a colon, a
key given twice) or would write back other values (``!!set``), the change is made on
what memdir reads and the block written anew: comments go, values stay."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memdir.doc import frontmatter
from memdir.files.store import Store
from memdir.service import Memory

ODD = {
    "tab": "---\ntitle:\tKettles\ntags: [a, b]\n---\n# Kettles\n\nDescale with vinegar.\n",
    "twice": "---\ntitle: Old\ntitle: Kettles\ntags: [a, b]\n---\n# Kettles\n\nDescale.\n",
    "set": "---\ntitle: Kettles\nseen: !!set {x, y}\n---\n# Kettles\n\nDescale.\n",
}


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[Memory]:
    root = Store.init(tmp_path / "s", git=False)
    with Memory.open(root, overrides={"store": {"git_commit": False}}) as mem:
        yield mem


@pytest.mark.parametrize("name", sorted(ODD))
def test_forget_and_merge_keep_every_value_memdir_reads(plain: Memory, name: str) -> None:
    text = ODD[name]
    rel = f"notes/{name}.md"
    plain.write(rel, text)  # memdir reads it, so it is written
    before = frontmatter.parse(text).fm
    assert plain.merge(rel, episode="ep-1", type="run")["added"]
    merged = (plain.root / rel).read_bytes()
    assert not plain.merge(rel, episode="ep-1", type="run")["added"]
    assert (plain.root / rel).read_bytes() == merged  # nothing to change: nothing written
    plain.forget(rel, reason="replaced")
    after_text = (plain.root / rel).read_text()
    after = frontmatter.parse(after_text)
    assert after.error is None, after.error
    kept = {k: v for k, v in after.fm.items() if k in before}
    assert kept == before, after_text
    assert after.fm["memory_status"] == "superseded"
    assert after.fm["superseded_reason"] == "replaced"
    assert [(e["type"], e["id"]) for e in after.fm["merged-from"]] == [("run", "ep-1")]
    assert after.body == frontmatter.parse(text).body
    assert plain.ls("notes/") == []  # superseded: hidden from the walk


@pytest.mark.parametrize("name", sorted(ODD))
def test_provenance_is_appended_to_such_a_document(plain: Memory, name: str) -> None:
    rel = f"notes/{name}.md"
    plain.write(rel, ODD[name], provenance="run:42", actor="planner")
    fm = frontmatter.parse((plain.root / rel).read_text()).fm
    assert fm["title"] == "Kettles"
    assert [(e["type"], e["id"], e["actor"]) for e in fm["derived-from"]] == [
        ("run", "42", "planner")
    ]


def test_a_block_ruamel_keeps_faithfully_keeps_its_comments() -> None:
    text = "---\n# who wrote it\ntitle: Kettles  # short\n---\n# K\n"
    edited = frontmatter.edit(text, lambda fm: fm.__setitem__("memory_status", "superseded"))
    assert "# who wrote it" in edited and "# short" in edited, edited
