"""The KiwiFS memory report: every rule, on real files in tmp_path."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memdir.kiwi import gojson
from memdir.kiwi import report as coverage
from memdir.kiwi.report import FileFacts, build_report, facts_for, report_for_folder, walk_key

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
MISSING = (
    "missing episode_id in {} \u2014 set memory_kind: episodic and episode_id, "
    "or match merged-from by path"
)


def write(root: Path, rel: str, fm: str | None = None, body: str = "body\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    text = body if fm is None else f"---\n{fm}---\n{body}"
    path.write_text(text, encoding="utf-8")
    return path


def report(root: Path, prefix: str | None = None) -> coverage.Report:
    return report_for_folder(root, prefix=prefix, now=NOW)


def paths(entries: list[coverage.FileEntry]) -> list[str]:
    return [e.path for e in entries]


# -- walk ------------------------------------------------------------------------------


def test_walk_order_and_filters(tmp_path: Path) -> None:
    for rel in [
        "episodes/a-b.md",
        "episodes/a/z.md",
        "episodes/ep-2.md",
        "episodes/ep-10.md",
        "episodes/B.md",
        "episodes/C.MD",
        "episodes/x.mdx",
        "episodes/x.markdown",
        "episodes/x.txt",
        "episodes/.hidden.md",
        "episodes/.dot/inside.md",
        ".git/config.md",
        "sub/.obsidian/x.md",
        "top.md",
    ]:
        write(tmp_path, rel, "id: x\n")
    got = [rel for rel, _ in coverage.walk_markdown(tmp_path)]
    assert got == [
        "episodes/B.md",
        "episodes/C.MD",
        "episodes/a/z.md",
        "episodes/a-b.md",
        "episodes/ep-10.md",
        "episodes/ep-2.md",
        "top.md",
    ]
    assert sorted(got, key=walk_key) == got
    assert paths(report(tmp_path).episodic_files) == got[:-1]


def test_walk_key_orders_like_walk() -> None:
    rels = ["a-b.md", "a/z.md", "a/b/c.md", "a.md", "ä.md", "Z.md", "a/y.md"]
    assert sorted(rels, key=walk_key) == ["Z.md", "a/b/c.md", "a/y.md", "a/z.md", "a-b.md",
                                          "a.md", "ä.md"]  # fmt: skip


def test_symlinked_folder_not_followed(tmp_path: Path) -> None:
    write(tmp_path / "outside", "episodes/x.md", "id: o\n")
    root = tmp_path / "root"
    write(root, "episodes/real.md", "id: r\n")
    os.symlink(tmp_path / "outside" / "episodes", root / "episodes" / "linked")
    assert [rel for rel, _ in coverage.walk_markdown(root)] == ["episodes/real.md"]


# -- prefix ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        (None, ["episodes/2026/x.md", "episodes/y.md"]),
        ("", ["episodes/2026/x.md", "episodes/y.md"]),
        ("episodes", ["episodes/2026/x.md", "episodes/y.md"]),
        ("sub/episodes", ["sub/episodes/x.md"]),
        ("/episodes", []),
        ("./episodes", []),
        ("episodes-old/", ["episodes-old/x.md"]),
    ],
)
def test_prefix_rules(tmp_path: Path, prefix: str | None, expected: list[str]) -> None:
    for rel in [
        "episodes/2026/x.md",
        "episodes/y.md",
        "episodes.md",
        "episodes-old/x.md",
        "sub/episodes/x.md",
    ]:
        write(tmp_path, rel, "id: e\n")
    assert paths(report(tmp_path, prefix).episodic_files) == expected


def test_normalize_prefix() -> None:
    assert coverage.normalize_prefix(None) == "episodes/"
    assert coverage.normalize_prefix("") == "episodes/"
    assert coverage.normalize_prefix("runs") == "runs/"
    assert coverage.normalize_prefix("runs/") == "runs/"
    assert coverage.normalize_prefix(" runs") == " runs/"


def test_prefix_from_kiwi_config(tmp_path: Path) -> None:
    write(tmp_path, "episodes/a.md", "id: a\n")
    write(tmp_path, "logs/b.md", "id: b\n")
    assert coverage.prefix_from_kiwi_config(tmp_path) is None
    cfg = tmp_path / ".kiwi" / "config.toml"
    cfg.parent.mkdir()
    cfg.write_text('[memory]\nepisodes_path_prefix = "logs"\n')
    assert coverage.prefix_from_kiwi_config(tmp_path) == "logs"
    assert paths(report(tmp_path).episodic_files) == ["logs/b.md"]
    # an explicit prefix wins over the config
    assert paths(report(tmp_path, "episodes").episodic_files) == ["episodes/a.md"]
    cfg.write_text('[memory]\nepisodes_path_prefix = ""\n')
    assert paths(report(tmp_path).episodic_files) == ["episodes/a.md"]
    cfg.write_text("not toml [")
    assert coverage.prefix_from_kiwi_config(tmp_path) is None


# -- memory_kind -----------------------------------------------------------------------


def test_memory_kind_classification(tmp_path: Path) -> None:
    write(tmp_path, "episodes/sem.md", "id: a\nmemory_kind: semantic\n")
    write(tmp_path, "episodes/cons.md", "id: b\nmemory_kind: ' Consolidation '\n")
    write(tmp_path, "episodes/work.md", "id: c\nmemory_kind: working\n")
    write(tmp_path, "episodes/num.md", "id: d\nmemory_kind: 42\n")
    write(tmp_path, "episodes/blank.md", "id: e\nmemory_kind: ''\n")
    write(tmp_path, "notes/epi.md", "id: f\nmemory_kind: ' EPISODIC'\n")
    write(tmp_path, "notes/other.md", "id: g\nmemory_kind: working\n")
    r = report(tmp_path)
    entries = {e.path: e for e in r.episodic_files}
    assert list(entries) == [
        "episodes/blank.md",
        "episodes/num.md",
        "episodes/work.md",
        "notes/epi.md",
    ]
    assert entries["notes/epi.md"].memory_kind == " EPISODIC"  # raw, as written
    assert entries["episodes/work.md"].memory_kind == "working"
    assert entries["episodes/num.md"].memory_kind is None
    assert entries["episodes/blank.md"].memory_kind is None
    js = coverage.report_to_json(r)["episodic_files"]
    assert js[0] == {"path": "episodes/blank.md", "episode_id": "e"}
    assert js[3] == {"path": "notes/epi.md", "episode_id": "f", "memory_kind": " EPISODIC"}


# -- episode identity ------------------------------------------------------------------


def test_episode_identity_and_warning(tmp_path: Path) -> None:
    write(tmp_path, "episodes/a.md", "episode_id: ' ep-a '\nid: other\n")
    write(tmp_path, "episodes/b.md", "episode_id: '  '\nid: '  id-b '\n")
    write(tmp_path, "episodes/c.md", "episode_id: 42\nid: yes\n")
    write(tmp_path, "episodes/d.md", "id: 1.5\n")
    write(tmp_path, "episodes/e.md", "id: [x]\n")
    write(tmp_path, "episodes/f.md", None, "no frontmatter\n")
    write(tmp_path, "episodes/g.md", "id: '42'\n")
    write(tmp_path, "episodes/h.md", "a: [\n")  # invalid YAML: empty frontmatter, silently
    write(tmp_path, "notes/page.md", "title: no id, not episodic\n")
    r = report(tmp_path)
    ids = {e.path: e.episode_id for e in r.episodic_files}
    assert ids == {
        "episodes/a.md": " ep-a ",
        "episodes/b.md": "id-b",
        "episodes/c.md": None,
        "episodes/d.md": None,
        "episodes/e.md": None,
        "episodes/f.md": None,
        "episodes/g.md": "42",
        "episodes/h.md": None,
    }
    assert r.warnings == [
        MISSING.format(p) for p in ["episodes/c.md", "episodes/d.md", "episodes/e.md",
                                    "episodes/f.md", "episodes/h.md"]
    ]  # fmt: skip
    text = coverage.render_text(r)
    assert "  - episodes/a.md  (episode_id= ep-a )\n" in text
    assert "  - episodes/c.md  (set episode_id)\n" in text


# -- merged-from -----------------------------------------------------------------------


def test_only_hyphenated_merged_from_counts(tmp_path: Path) -> None:
    write(tmp_path, "episodes/e.md", "episode_id: e1\n")
    for key in ("merged_from", "derived-from", "consolidated", "merged-into"):
        write(tmp_path, f"pages/{key}.md", f"{key}:\n  - type: episode\n    id: e1\n")
    r = report(tmp_path)
    assert paths(r.unmerged) == ["episodes/e.md"] and r.merged_from_refs == 0
    write(tmp_path, "pages/real.md", "merged-from:\n  - type: episode\n    id: e1\n")
    r = report(tmp_path)
    assert r.unmerged == [] and r.merged_from_refs == 1 and r.coverage_pct == 100.0


@pytest.mark.parametrize("typ", ["episode", "run", "session", "trace", "event", "ingest", "RUN"])
def test_compatible_types(tmp_path: Path, typ: str) -> None:
    write(tmp_path, "episodes/e.md", "episode_id: E-1\n")
    write(tmp_path, "page.md", f"merged-from:\n  - {{type: ' {typ} ', id: ' E-1 '}}\n")
    assert report(tmp_path).unmerged == []


@pytest.mark.parametrize(
    "item",
    [
        "{type: note, id: E-1}",  # not a compatible type
        "{type: run, id: e-1}",  # id is case-sensitive
        "{type: '', id: E-1}",
        "{id: E-1}",
        "{type: run, id: 7}",
        "{type: 5, id: E-1}",
        "{type: run, path: episodes/other.md}",
        "{type: run, id: ''}",
    ],
)
def test_items_that_do_not_cover(tmp_path: Path, item: str) -> None:
    write(tmp_path, "episodes/e.md", "episode_id: E-1\n")
    write(tmp_path, "page.md", f"merged-from:\n  - {item}\n")
    r = report(tmp_path)
    assert paths(r.unmerged) == ["episodes/e.md"] and r.merged_from_refs == 1


def test_path_entries(tmp_path: Path) -> None:
    write(tmp_path, "episodes/a.md", None)  # no id at all
    write(tmp_path, "episodes/b.md", "episode_id: b\n")
    write(tmp_path, "episodes/c.md", "episode_id: c\n")
    write(tmp_path, "episodes/d.md", "episode_id: d\n")
    write(
        tmp_path,
        "page.md",
        "merged-from:\n"
        "  - {type: note, path: episodes/a.md}\n"  # K2: any type covers by path
        "  - {type: run, id: zzz, path: episodes/b.md}\n"  # K2 even when id is set
        "  - {type: episode, path: 'episodes\\c.md '}\n"  # K1 path, trimmed, \\ -> /
        "  - {type: run, path: ' episodes/d.md'}\n",  # K2 untrimmed: no match
    )
    r = report(tmp_path)
    assert paths(r.unmerged) == ["episodes/d.md"]
    assert r.merged_from_refs == 4


def test_merged_from_shapes_and_ref_counting(tmp_path: Path) -> None:
    write(tmp_path, "episodes/e.md", "episode_id: e\n")
    write(tmp_path, "a-map.md", "merged-from: {type: episode, id: e}\n")
    write(tmp_path, "b-scalar.md", "merged-from: e\n")
    write(tmp_path, "c-null.md", "merged-from:\n")
    write(tmp_path, "d-empty.md", "merged-from: []\n")
    write(
        tmp_path,
        "f-mixed.md",
        "merged-from:\n  - e\n  - 42\n  - [x]\n  - {type: run, id: nope}\n"
        "  - {type: run, id: nope}\n  - {}\n",
    )
    r = report(tmp_path)
    assert r.warnings == [coverage.SHAPE_WARNING, coverage.SHAPE_WARNING]
    assert r.merged_from_refs == 3  # every mapping item, duplicates and useless ones included
    assert paths(r.unmerged) == ["episodes/e.md"]


def test_self_cover_and_shared_ids(tmp_path: Path) -> None:
    write(tmp_path, "episodes/self.md", "episode_id: s\nmerged-from:\n  - {type: episode, id: s}\n")
    write(tmp_path, "episodes/x1.md", "episode_id: dup\n")
    write(tmp_path, "episodes/x2.md", "id: ' dup'\n")
    write(tmp_path, "episodes/y.md", "episode_id: y\n")
    write(tmp_path, "page.md", "merged-from:\n  - {type: session, id: dup}\n")
    r = report(tmp_path)
    assert paths(r.unmerged) == ["episodes/y.md"]
    assert r.coverage_pct == pytest.approx(75.0)
    assert r.coverage_pct == 3 / 4 * 100


def test_warning_order_follows_walk(tmp_path: Path) -> None:
    write(tmp_path, "episodes/b.md", "merged-from: x\n")
    write(tmp_path, "episodes/a.md", None)
    write(tmp_path, "z.md", "merged-from: {a: 1}\n")
    r = report(tmp_path)
    assert r.warnings == [
        MISSING.format("episodes/a.md"),
        MISSING.format("episodes/b.md"),
        coverage.SHAPE_WARNING,
        coverage.SHAPE_WARNING,
    ]


# -- metrics ---------------------------------------------------------------------------


def test_coverage_pct_unrounded_and_zero(tmp_path: Path) -> None:
    assert report(tmp_path).coverage_pct == 0.0
    for i in range(3):
        write(tmp_path, f"episodes/{i}.md", f"episode_id: '{i}'\n")
    write(tmp_path, "p.md", "merged-from:\n  - {type: run, id: '0'}\n")
    r = report(tmp_path)
    assert r.coverage_pct == (3 - 2) / 3 * 100
    assert '"coverage_pct": 33.33333333333333,' in coverage.dumps_report(r)
    assert "coverage:                33.3%\n" in coverage.render_text(r)


def test_avg_age_over_active_files(tmp_path: Path) -> None:
    ages = {"a.md": (2.0, None), "b.md": (4.0, "' Active '"), "c.md": (6.0, "''"),
            "d.md": (100.0, "stale"), "e.md": (100.0, "contested")}  # fmt: skip
    for name, (days, status) in ages.items():
        p = write(tmp_path, name, "x: 1\n" if status is None else f"memory_status: {status}\n")
        t = (NOW - timedelta(days=days)).timestamp()
        os.utime(p, (t, t))
    r = report(tmp_path)
    assert r.avg_age_days == pytest.approx(4.0, abs=1e-6)
    assert r.contested_count == 1
    assert "avg age (active pages):  4.0 days\n" in coverage.render_text(r)
    empty = tmp_path / "empty"
    empty.mkdir()
    write(empty, "s.md", "memory_status: stale\n")
    assert report(empty).avg_age_days == 0.0


@pytest.mark.parametrize(
    ("value", "expired"),
    [
        ("2026-05-31", True),
        ("'2026-06-02'", False),
        ("2026-06-01T11:59:59Z", True),
        ("2026-06-01T12:00:01Z", False),
        ("2026-06-01T13:00:00+02:00", True),
        ("2026-06-01T12:30:00.5-01:00", False),
        ("2020-01-01T00:00:00.123456789Z", True),
        ("2020-01-01 00:00:00", False),  # not RFC 3339
        ("2020/01/01", False),
        ("'Jan 1 2020'", False),
        ("2020-02-30", False),
        ("20200101", False),
        ("2020-01-01t00:00:00z", False),
        ("2020-01-01T00:00:00", False),  # no zone
        ("", False),
        ("[2020-01-01]", False),
    ],
)
def test_expired_layouts(tmp_path: Path, value: str, expired: bool) -> None:
    write(tmp_path, "x.md", f"expires_at: {value}\n")
    assert report(tmp_path).expired_count == (1 if expired else 0)


@pytest.mark.parametrize(
    ("yaml_value", "counts"),
    [
        ("'[[other]]'", True),
        ("[[other]]", True),  # unquoted: a nested list, flattened
        ("'/pages/x.md'", True),
        ("['', '[[y]]']", True),
        ("[[[deep]]]", True),
        ("''", False),
        ("'[[]]'", False),
        ("'[[ ]]'", False),
        ("'/'", False),
        ("42", False),
        ("[1, true]", False),
        ("[]", False),
        ("{a: b}", False),
        ("null", False),
    ],
)
def test_contradictions_unwrapping(tmp_path: Path, yaml_value: str, counts: bool) -> None:
    write(tmp_path, "x.md", f"contradicts: {yaml_value}\n")
    assert report(tmp_path).contradictions == (1 if counts else 0)


def test_contested_counts_as_contradiction(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "memory_status: CONTESTED\n")
    write(tmp_path, "b.md", "memory_status: contested\ncontradicts: '[[a]]'\n")
    write(tmp_path, "c.md", "contradicts: [a]\n")
    r = report(tmp_path)
    assert r.contested_count == 2 and r.contradictions == 3


def test_scope_counts(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "title: no scope\n")
    assert report(tmp_path).scope_counts is None
    assert '"scope_counts": null,' in coverage.dumps_report(report(tmp_path))
    assert "scope breakdown:         (none)\n" in coverage.render_text(report(tmp_path))
    write(tmp_path, "b.md", "scope: ' team '\n")
    write(tmp_path, "c.md", "scope: team\n")
    write(tmp_path, "d.md", "scope:\n")
    write(tmp_path, "e.md", "scope: 42\n")
    write(tmp_path, "f.md", "scope: ''\n")
    write(tmp_path, "g.md", "scope: Alpha\n")
    r = report(tmp_path)
    assert r.scope_counts == {"": 3, "Alpha": 1, "team": 2}
    text = coverage.render_text(r)
    assert "scope breakdown:\n  : 3\n  Alpha: 1\n  team: 2\n" in text


# -- output ----------------------------------------------------------------------------


def test_json_field_order_and_shape(tmp_path: Path) -> None:
    write(tmp_path, "episodes/a.md", "episode_id: a\nmemory_kind: episodic\n")
    write(tmp_path, "episodes/b.md", None)
    out = coverage.dumps_report(report(tmp_path))
    data = json.loads(out)
    assert list(data) == [
        "episodic_count",
        "total_episodic",
        "total_unmerged",
        "contradictions",
        "merged_from_refs",
        "coverage_pct",
        "avg_age_days",
        "expired_count",
        "contested_count",
        "scope_counts",
        "episodic_files",
        "unmerged",
        "warnings",
    ]
    assert data["episodic_count"] == data["total_episodic"] == 2
    assert data["episodic_files"] == [
        {"path": "episodes/a.md", "episode_id": "a", "memory_kind": "episodic"},
        {"path": "episodes/b.md"},
    ]
    assert out.startswith('{\n  "episodic_count": 2,\n  "total_episodic": 2,\n')
    assert '  "coverage_pct": 0,\n' in out
    assert '  "episodic_files": [\n    {\n      "path": "episodes/a.md",\n' in out


def test_json_empty_lists_and_no_warnings(tmp_path: Path) -> None:
    out = coverage.dumps_report(report(tmp_path))
    assert '"episodic_files": [],\n  "unmerged": []\n}' in out
    assert "warnings" not in out
    assert json.loads(out)["coverage_pct"] == 0


def test_go_json_escapes_and_floats() -> None:
    assert gojson.go_string('a<b>&"\\\n\t\x01\u2028é') == (
        '"a\\u003cb\\u003e\\u0026\\"\\\\\\n\\t\\u0001\\u2028é"'
    )
    cases = {
        100.0: "100",
        0.0: "0",
        33.333333333333336: "33.333333333333336",
        1.5: "1.5",
        1e-05: "0.00001",
        1e-07: "1e-7",
        1.5e-07: "1.5e-7",
        1e21: "1e+21",
        123456789012345680000.0: "123456789012345680000",
        2.5e-100: "2.5e-100",
    }
    for value, text in cases.items():
        assert gojson.go_float(value) == text


def test_text_output(tmp_path: Path) -> None:
    write(tmp_path, "episodes/a.md", "episode_id: a\n")
    write(tmp_path, "episodes/b.md", None)
    write(tmp_path, "p.md", "merged-from:\n  - {type: run, id: nope}\n")
    text = coverage.render_text(report(tmp_path))
    assert text.startswith(
        "episodic files:          2\n"
        "merged-from references:  1\n"
        "unmerged (no merged-from): 2\n"
        "coverage:                0.0%\n"
    )
    assert text.endswith(
        "contradictions:          0\n"
        "scope breakdown:         (none)\n"
        "  - episodes/a.md  (episode_id=a)\n"
        "  - episodes/b.md  (set episode_id)\n"
    )
    write(
        tmp_path,
        "q.md",
        "merged-from:\n  - {type: run, id: a}\n  - {type: x, path: episodes/b.md}\n",
    )
    text = coverage.render_text(report(tmp_path))
    assert text.endswith("all episodic files are referenced by at least one merged-from list\n")


def test_crlf_files_and_uppercase_extension(tmp_path: Path) -> None:
    (tmp_path / "episodes").mkdir()
    (tmp_path / "episodes" / "W.MD").write_bytes(b"---\r\nepisode_id: w\r\n---\r\nbody\r\n")
    r = report(tmp_path)
    assert [(e.path, e.episode_id) for e in r.episodic_files] == [("episodes/W.MD", "w")]


def test_report_writes_nothing(tmp_path: Path) -> None:
    write(tmp_path, "episodes/a.md", "episode_id: a\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    report(tmp_path)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


# -- facts -----------------------------------------------------------------------------


def test_facts_json_round_trip() -> None:
    fm: dict[str, Any] = {
        "memory_kind": "Episodic",
        "episode_id": " e ",
        "merged-from": [{"type": "run", "id": "r", "path": "p.md"}, "junk"],
        "memory_status": " Contested ",
        "expires_at": "2026-01-01",
        "scope": " s ",
    }
    f = facts_for("episodes/é.md", fm, 1234.5)
    assert f.mk_class == "episodic" and f.episode_id == "e" and f.episode_id_raw == " e "
    assert f.merged_keys == ("run:r", "episode:path:p.md") and f.merged_from_refs == 1
    assert f.memory_status == "contested" and f.contradiction and f.scope == "s"
    assert f.expires_at == datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    assert FileFacts.from_json(f.to_json()) == f
    assert FileFacts.from_json(f.to_json().encode()) == f
    bare = facts_for("x.md", {}, 1.0)
    assert FileFacts.from_json(bare.to_json()) == bare and bare.missing_id
    assert len(bare.to_json()) < 40


def test_build_report_matches_folder_report(tmp_path: Path) -> None:
    write(tmp_path, "episodes/a.md", "episode_id: a\n")
    write(tmp_path, "episodes/b.md", "id: b\nscope: x\n")
    write(tmp_path, "page.md", "merged-from:\n  - {type: run, id: a}\n")
    from memdir.doc import frontmatter

    facts = [
        FileFacts.from_json(
            facts_for(
                rel, frontmatter.parse(p.read_text()).fm, p.stat().st_mtime_ns / 1e9
            ).to_json()
        )
        for rel, p in coverage.walk_markdown(tmp_path)
    ]
    via_facts = coverage.dumps_report(build_report(facts, "episodes/", NOW))
    assert via_facts == coverage.dumps_report(report(tmp_path))


def test_build_report_speed() -> None:
    facts = []
    for i in range(100_000):
        if i % 3:
            facts.append(FileFacts(f"episodes/{i:06d}.md", episode_id_raw=f"e{i}",
                                   episode_id=f"e{i}", mtime=1.0))  # fmt: skip
        else:
            facts.append(FileFacts(f"pages/{i:06d}.md", mk_class="semantic",
                                   merged_keys=(f"run:e{i + 1}",), merged_from_refs=1,
                                   memory_status="active", mtime=1.0))  # fmt: skip
    start = time.process_time()
    r = build_report(facts, "episodes/", NOW)
    elapsed = time.process_time() - start
    assert r.total_episodic == 66_666 and r.total_unmerged == 66_666 - 33_333
    assert elapsed < 1.5, elapsed  # CI floor; the measured figure is in the report


def test_file_lists_render_like_the_general_encoder() -> None:
    from memdir.kiwi.gojson import _go_json, dumps_go, go_string

    entries = [
        {"path": "episodes/a.md", "episode_id": "a"},
        {"path": "episodes/<b>&\u2028.md", "episode_id": "b\x01", "memory_kind": "episodic"},
    ]
    expected = (
        "[\n  {\n    "
        + ",\n    ".join(f"{go_string(k)}: {go_string(v)}" for k, v in entries[0].items())
        + "\n  },\n  {\n    "
        + ",\n    ".join(f"{go_string(k)}: {go_string(v)}" for k, v in entries[1].items())
        + "\n  }\n]"
    )
    assert dumps_go(entries) == expected
    assert "\\u003cb\\u003e\\u0026\\u2028" in expected and "\\u0001" in expected
    out: list[str] = []
    _go_json([{"path": "x.md"}, {"n": 1}], "", out)  # mixed values: the general path
    assert "".join(out) == '[\n  {\n    "path": "x.md"\n  },\n  {\n    "n": 1\n  }\n]'
