"""How frontmatter values reach the index (strict JSON) and how `where` filters meet them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import run_cli
from http_server import live_server
from memdir.files.store import Store
from memdir.service import Memory

NO_GIT = {"store": {"git_commit": False}}
LETTERS = {"store": {"git_commit": False}, "embeddings": {"provider": "letters"}}
REPARSE_MIGRATION = "0800_frontmatter_json_reparse"

# path -> frontmatter lines; every file says "kettle" so one query meets them all
NON_FINITE = {
    "notes/nan.md": "score: .nan\nstatus: draft",
    "notes/inf.md": "score: .inf\nstatus: draft",
    "notes/minus.md": "score: -.Inf\nstatus: draft",
    "notes/nested.md": "score: 3\nstatus: draft\nseen: [.nan, 1]\nmeta: {w: !!float .inf}",
    "notes/plain.md": "score: 2.5\nstatus: final",
}


def _seed(mem: Memory) -> None:
    for path, fm in NON_FINITE.items():
        mem.write(path, f"---\n{fm}\n---\n# {path}\n\nThe kettle is descaled.\n")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Store.init(tmp_path / "s", git=False)


@pytest.fixture
def seeded(root: Path) -> Iterator[Memory]:
    with Memory.open(root, overrides=NO_GIT) as mem:
        _seed(mem)
        yield mem


def _found(mem: Memory, *where: str, mode: str = "bm25") -> set[str]:
    return {h.path for h in mem.search("kettle", mode=mode, where=list(where), limit=20)}


def test_non_finite_numbers_are_indexed_as_strict_json(seeded: Memory) -> None:
    rows = seeded.index.conn.execute("SELECT path, fm, json_valid(fm) FROM docs").fetchall()
    assert rows and all(valid == 1 for _p, _fm, valid in rows)
    stored = {path: json.loads(fm) for path, fm, _v in rows}
    assert stored["notes/nan.md"]["score"] == ".nan"
    assert stored["notes/inf.md"]["score"] == ".inf"
    assert stored["notes/minus.md"]["score"] == "-.inf"
    assert stored["notes/nested.md"]["seen"] == [".nan", 1]
    assert stored["notes/nested.md"]["meta"] == {"w": ".inf"}
    assert stored["notes/plain.md"]["score"] == 2.5
    # the file keeps what was written
    assert "score: .nan\n" in seeded.read("notes/nan.md").content


def test_where_filters_meet_non_finite_numbers(seeded: Memory) -> None:
    assert _found(seeded, "status=draft") == set(NON_FINITE) - {"notes/plain.md"}
    assert _found(seeded, "score=.inf") == {"notes/inf.md"}
    assert _found(seeded, "score=+.INF") == {"notes/inf.md"}
    assert _found(seeded, "score=-.inf") == {"notes/minus.md"}
    assert _found(seeded, "score=.NaN") == {"notes/nan.md"}
    assert _found(seeded, "seen=.nan") == {"notes/nested.md"}
    assert _found(seeded, "score=2.5") == {"notes/plain.md"}
    # the Python API's mapping form types a float the same way
    hits = seeded.search("kettle", mode="bm25", where={"score": float("inf")})
    assert [h.path for h in hits] == ["notes/inf.md"]


def test_where_over_http_in_bm25_and_hybrid_mode(toy: None, root: Path) -> None:
    with Memory.open(root, overrides=LETTERS) as mem:
        _seed(mem)
        mem.embed()
    with live_server(root, LETTERS, mcp=False) as live, live.client() as http:
        for mode in ("bm25", "hybrid"):
            for where, expected in (
                ("status=draft", set(NON_FINITE) - {"notes/plain.md"}),
                ("score=.inf", {"notes/inf.md"}),
                ("score=.nan", {"notes/nan.md"}),
            ):
                params = {"q": "kettle", "mode": mode, "where": where, "limit": "20"}
                resp = http.get("/v1/search", params=params)
                assert resp.status_code == 200, (mode, where, resp.text)
                hits = resp.json()
                assert {h["path"] for h in hits} == expected, (mode, where)
                assert all(h["why"]["mode"] == mode for h in hits)


def test_an_index_made_before_strict_json_is_parsed_again(root: Path) -> None:
    with Memory.open(root, overrides=NO_GIT) as mem:
        _seed(mem)
    db = sqlite3.connect(root / ".memdir" / "index.db")
    # what the indexer stored before: Python's non-standard NaN, and a typed key
    db.execute("UPDATE docs SET fm = '{\"score\": NaN}' WHERE path = 'notes/nan.md'")
    db.execute("""UPDATE docs SET fm = '{"true": 1}' WHERE path = 'notes/plain.md'""")
    db.execute("DELETE FROM migrations WHERE name = ?", (REPARSE_MIGRATION,))
    db.commit()
    db.close()
    with Memory.open(root, overrides=NO_GIT) as again:
        assert _found(again, "score=.nan") == {"notes/nan.md"}
        assert _found(again, "status=final") == {"notes/plain.md"}
        assert again.doctor().ok


def test_where_matches_scalars_and_list_items_never_maps(root: Path) -> None:
    shapes = {
        "notes/map.md": "meta: {a: 1, b: x}",
        "notes/list.md": "meta: [1, x, [2], {c: 3}]",
        "notes/scalar.md": "meta: x",
        "notes/text.md": "meta: '[2]'",
    }
    with Memory.open(root, overrides=NO_GIT) as mem:
        for path, fm in shapes.items():
            mem.write(path, f"---\n{fm}\n---\n# {path}\n\nThe kettle is descaled.\n")
        assert _found(mem, "meta=1") == {"notes/list.md"}
        assert _found(mem, "meta=x") == {"notes/list.md", "notes/scalar.md"}
        assert _found(mem, "meta=a") == set()  # a map's key is not its value either
        # a nested list is not the text of its JSON, which a string value may be
        assert _found(mem, "meta=[2]") == {"notes/text.md"}
        assert _found(mem, 'meta={"c":3}') == set()
        assert _found(mem, "meta=2") == set()  # nor does a where filter reach into it


def _strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_a_turn_with_a_non_finite_field_is_shown_as_strict_json(root: Path) -> None:
    with Memory.open(root, overrides=NO_GIT) as mem:
        turn = mem.record_turn(thread="t1", input="descale the kettle?", output="done")
    record = root / turn.path
    record.write_text(record.read_text().replace("---\n", "---\nscore: -.inf\n", 1))
    done = run_cli("--root", str(root), "turn", "show", turn.id, "--json")
    assert done.returncode == 0, done.stderr.decode()
    assert _strict(done.stdout.decode())["score"] == "-.inf"
    with live_server(root, NO_GIT, mcp=False) as live, live.client() as http:
        resp = http.get(f"/v1/turns/{turn.id}")
        assert resp.status_code == 200 and _strict(resp.text)["score"] == "-.inf"


def test_ints_beyond_64_bits_are_compared_exactly(root: Path) -> None:
    sizes = {"notes/max.md": 2**64 - 1, "notes/below.md": 2**64 - 2, "notes/int64.md": 2**63 - 1}
    with Memory.open(root, overrides=NO_GIT) as mem:
        for path, n in sizes.items():
            mem.write(path, f"---\nn: {n}\n---\n# {path}\n\nThe kettle is descaled.\n")
        # as floats, the first two were one number (and 2**63 matched 2**63 + 1)
        assert _found(mem, f"n={2**64 - 1}") == {"notes/max.md"}
        assert _found(mem, f"n={2**64 - 2}") == {"notes/below.md"}
        assert _found(mem, f"n={2**63 - 1}") == {"notes/int64.md"}
        assert _found(mem, f"n={2**63}") == set()
        assert seen_as(mem, "notes/max.md") == {"n": str(2**64 - 1)}
        assert seen_as(mem, "notes/int64.md") == {"n": 2**63 - 1}
    db = sqlite3.connect(root / ".memdir" / "index.db")
    db.execute(f"UPDATE docs SET fm = '{{\"n\": {2**64 - 2}}}' WHERE path = 'notes/below.md'")
    db.execute("DELETE FROM migrations WHERE name = ?", (REPARSE_MIGRATION,))
    db.commit()
    db.close()
    with Memory.open(root, overrides=NO_GIT) as again:  # an older index is parsed again
        assert _found(again, f"n={2**64 - 2}") == {"notes/below.md"}


def seen_as(mem: Memory, path: str) -> Any:
    row = mem.index.conn.execute("SELECT fm FROM docs WHERE path = ?", (path,)).fetchone()
    return json.loads(row[0])
