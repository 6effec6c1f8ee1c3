"""YAML aliases in frontmatter are invalid: no cyclic or expanded values reach any reader."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from helpers import committed, run_cli
from memdir.doc import frontmatter
from memdir.doc.fastyaml import fast_load
from memdir.doc.frontmatter import _load_yaml
from memdir.errors import InvalidDocument
from memdir.index import documents
from memdir.kiwi import report as coverage
from memdir.service import Memory

ALIASES = "aliases are not supported"

CYCLIC = """---
episode_id: ep-loop
memory_kind: episodic
a: &a [*a]
---
# Loop

a cyclic frontmatter
"""


def laughs(levels: int = 9) -> str:
    """A "billion laughs" document: each level lists the one before nine times."""
    names = "abcdefghi"[:levels]
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
    for prev, name in zip(names, names[1:], strict=False):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "---\ntitle: Laughs\n" + "\n".join(lines) + "\n---\n# Laughs\n\nzorblax body\n"


LAUGHS = laughs()


def timed_parse(text: str) -> frontmatter.Parsed:
    start = time.perf_counter()
    parsed = frontmatter.parse(text)
    assert time.perf_counter() - start < 0.2
    return parsed


@pytest.mark.parametrize("text", [CYCLIC, LAUGHS], ids=["cyclic", "laughs"])
def test_alias_reads_as_invalid_and_quickly(text: str) -> None:
    assert len(LAUGHS) < 400  # nine levels of nine: 9**9 strings if the aliases were expanded
    parsed = timed_parse(text)
    assert parsed.has_block and parsed.fm == {}
    assert parsed.error is not None and ALIASES in parsed.error
    assert parsed.body.startswith("# ")
    start = time.perf_counter()
    row = documents.analyze("notes/x.md", text.encode(), 0, len(text))
    assert time.perf_counter() - start < 0.2
    assert row.fm == "{}" and row.fm_ok is False and row.fm_error == parsed.error


def test_error_names_the_first_alias_and_its_line() -> None:
    assert frontmatter.parse(CYCLIC).error == (
        "invalid YAML frontmatter: YAML aliases are not supported in frontmatter"
        " (*a at line 4, column 8)"
    )
    error = frontmatter.parse(LAUGHS).error
    assert error is not None and error.endswith("(*a at line 4, column 8)")


@pytest.mark.parametrize(
    "raw",
    [
        "a: &x 1\nb: *x\n",
        "a: *x\n",  # undefined: PyYAML's own error
        "&k k: 1\n*k : 2\n",
        "base: &b {x: 1}\nm:\n  <<: *b\n",
        "a:\n  - &x one\n  - *x\n",
        "a:\n- k: &x v\n  j: *x\n",
        'a: ["x", *x]\n',
        "a: &x\n  - 1\nb: *x\n",
        "- &x a\n- *x\n",
    ],
)
def test_every_alias_is_refused_and_the_fast_path_declines(raw: str) -> None:
    assert fast_load(raw) is None
    fm, error = _load_yaml(raw)
    assert fm == {} and error is not None and "alias" in error
    assert frontmatter.parse("---\n" + raw + "---\n").error == error
    with pytest.raises(InvalidDocument, match="alias"):
        frontmatter.load_strict("---\n" + raw + "---\n")
    with pytest.raises(InvalidDocument, match="alias"):
        frontmatter.edit("---\n" + raw + "---\n", lambda d: d.update(z=1))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a: &x 1\n", {"a": 1}),
        ("a: &x [1, 2]\nb: 2\n", {"a": [1, 2], "b": 2}),
        ("a:\n  - &x one\n", {"a": ["one"]}),
        ("a: x *y\nb: x &y\n", {"a": "x *y", "b": "x &y"}),
        ("a: \"*y\"\nb: '&y z'\n", {"a": "*y", "b": "&y z"}),
        ("a:\n  - '*y'\n", {"a": ["*y"]}),
        ('a: ["*y", "&z"]\n', {"a": ["*y", "&z"]}),
    ],
)
def test_anchors_alone_and_star_in_strings_read_the_same_on_both_paths(
    raw: str, expected: dict[str, Any]
) -> None:
    fm, error = _load_yaml(raw)
    assert error is None and fm == expected
    fast = fast_load(raw)
    assert fast is None or fast == expected
    assert frontmatter.parse("---\n" + raw + "---\n").fm == expected


def test_index_keeps_a_frontmatter_it_cannot_store_as_invalid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop: list[Any] = []
    loop.append(loop)
    text = "---\ntitle: T\n---\n# Heading\n\nbody\n"

    def cyclic_parse(value: str) -> frontmatter.Parsed:
        return frontmatter.Parsed({"title": "T", "loop": loop}, "# Heading\n\nbody\n", True)

    monkeypatch.setattr(documents.frontmatter, "parse", cyclic_parse)
    row = documents.analyze("notes/t.md", text.encode(), 0, len(text))
    assert row.fm == "{}" and row.fm_ok is False
    assert row.fm_error == "frontmatter cannot be stored: Circular reference detected"
    assert row.title == "Heading" and row.body == "# Heading\n\nbody\n"


# --------------------------------------------------------------------------------------------
# A store with such files


def place(root: Path) -> None:
    (root / "episodes").mkdir(exist_ok=True)
    (root / "notes").mkdir(exist_ok=True)
    (root / "episodes/loop.md").write_text(CYCLIC)
    (root / "notes/laughs.md").write_text(LAUGHS)
    (root / "notes/fine.md").write_text("---\ntitle: Fine\n---\nzorblax body too\n")


def test_hand_placed_files_are_listed_searched_and_reported(mem: Memory) -> None:
    place(mem.root)
    listed = {row["path"]: row["title"] for row in mem.ls()}
    assert listed["episodes/loop.md"] == "Loop"
    assert listed["notes/laughs.md"] == "Laughs"
    assert listed["notes/fine.md"] == "Fine"
    hits = mem.search("zorblax", mode="bm25")
    assert {h.path for h in hits} == {"notes/laughs.md", "notes/fine.md"}
    assert [h.path for h in mem.grep("cyclic")] == ["episodes/loop.md"]
    report = mem.doctor().to_dict()
    invalid = {i["path"]: i["error"] for i in report["invalid_yaml"]}
    assert set(invalid) == {"episodes/loop.md", "notes/laughs.md"}
    assert all(ALIASES in e for e in invalid.values())
    assert report["ok"] is True
    row = mem.index.conn.execute("SELECT fm, fm_ok FROM docs WHERE path = ?", ("notes/laughs.md",))
    assert tuple(row.fetchone()) == ("{}", 0)
    stats = mem.reindex(full=True)
    assert stats.added >= 3


def test_memory_report_reads_an_aliased_frontmatter_as_empty(mem: Memory) -> None:
    place(mem.root)
    # KiwiFS reads invalid YAML as empty, silently: the episode's id is not seen.
    warning = "missing episode_id in episodes/loop.md"
    now = datetime(2026, 1, 1, tzinfo=UTC)
    report = mem.memory_report(now=now)
    assert [(e.path, e.episode_id) for e in report.episodic_files] == [("episodes/loop.md", None)]
    assert any(w.startswith(warning) for w in report.warnings)
    folder = coverage.report_for_folder(mem.root, now=now)
    assert coverage.report_to_json(folder) == coverage.report_to_json(report)


@pytest.mark.parametrize("text", [CYCLIC, LAUGHS], ids=["cyclic", "laughs"])
@pytest.mark.parametrize("provenance", [None, "run:1"])
def test_write_refuses_aliases_and_leaves_nothing(
    mem: Memory, text: str, provenance: str | None
) -> None:
    before = committed(mem.root)
    with pytest.raises(InvalidDocument, match=ALIASES):
        mem.write("notes/alias.md", text, provenance=provenance)
    assert not (mem.root / "notes/alias.md").exists()
    assert committed(mem.root) == before
    assert [row["path"] for row in mem.ls("notes/")] == []


def test_cli_write_prints_the_reason(store_root: Path, tmp_path: Path) -> None:
    source = tmp_path / "loop.md"
    source.write_text(CYCLIC)
    out = run_cli("write", "notes/loop.md", "--file", str(source), "--root", str(store_root))
    assert out.returncode != 0
    assert ALIASES in out.stderr.decode() and "*a at line 4" in out.stderr.decode()
    assert not (store_root / "notes/loop.md").exists()


def test_ingest_drops_an_aliased_frontmatter(mem: Memory) -> None:
    placed = mem.ingest([("loop.md", CYCLIC), ("laughs.md", LAUGHS)])
    assert [p["source"] for p in placed] == ["loop.md", "laughs.md"]
    for item, source in zip(placed, (CYCLIC, LAUGHS), strict=True):
        text = (mem.root / item["path"]).read_text()
        parsed = timed_parse(text)
        assert parsed.error is None
        assert parsed.fm["type"] == "ingest" and parsed.fm["episode_id"] == item["episode_id"]
        assert not {"a", "b", "title"} & set(parsed.fm)
        assert parsed.body == source  # the source is kept whole, as the body
        json.dumps(parsed.fm)
    assert mem.doctor().to_dict()["invalid_yaml"] == []
    assert {row["path"] for row in mem.ls("inbox/")} == {p["path"] for p in placed}
