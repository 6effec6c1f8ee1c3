"""Follow-ups of a review: evaluate warns of missing expected paths, consolidate shows the
sources it skips, the harness error names the verbs that refuse, init refuses a nested store in
the core, and the default compactor counts one call in the singular."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import BREAD, run_cli
from memdir.doc import frontmatter
from memdir.errors import Conflict, HarnessChanged
from memdir.files.store import Store, is_store
from memdir.service import Memory
from memdir.turns.compaction import DefaultCompactor


@pytest.fixture
def kitchen(eng: Memory) -> Memory:
    """The engine review's kitchen store: one bundle (BREAD routes to it, BROKEN does not
    parse)."""
    return eng


def _drop(root: Path, rel: str, text: str) -> None:
    """A file placed by hand in the store and committed, like a user's own change."""
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text, encoding="utf-8")
    for args in (["add", "-A"], ["commit", "-q", "-m", f"drop {rel}"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


# ---- evaluate: expected paths that are not files -----------------------------------------


# ---- consolidate: sources left in inbox/ ---------------------------------------------------


def test_the_docs_say_where_consolidate_reports_skipped_sources() -> None:
    docs = Path(__file__).resolve().parent.parent / "docs"
    for name in ("commands.md", "engine.md"):
        text = " ".join((docs / name).read_text(encoding="utf-8").split())
        assert "`skipped <path>: <why>`" in text, name
        assert "stderr with `--plan`" in text, name


# ---- the harness error names the verbs that refuse --------------------------------------


def test_the_harness_error_names_exactly_the_verbs_that_refuse(kitchen: Memory) -> None:
    kitchen.write("notes/a.md", "# A\n")
    harness = kitchen.root / "HARNESS.md"
    harness.write_text(harness.read_text(encoding="utf-8") + "\nA deliberate change.\n")
    # Every verb that writes to the store, by its CLI name.
    verbs: dict[str, Callable[[], Any]] = {
        "write": lambda: kitchen.write("notes/b.md", "# B\n"),
        "merge": lambda: kitchen.merge("notes/a.md", episode="e1"),
        "turn record": lambda: kitchen.record_turn(thread="t", input="hi", output="yo"),
        "forget": lambda: kitchen.forget("notes/b.md"),
        "ingest": lambda: kitchen.ingest([("bread.md", BREAD)]),
        "consolidate": kitchen.consolidate,
        "bundle add": lambda: kitchen.bundle_add("garden", "tomatoes, compost"),
        "bundle remove": lambda: kitchen.bundle_remove("kitchen"),
        "episode add": lambda: kitchen.episode_add(kind="life", situation="a walk"),
        "reflect": kitchen.reflect,
    }
    refused: dict[str, str] = {}
    for name, call in verbs.items():
        try:
            call()
        except HarnessChanged as exc:
            refused[name] = str(exc)
    assert refused and len(set(refused.values())) == 1
    [message] = set(refused.values())
    assert "writing verbs" not in message
    for name in verbs:
        named = re.search(rf"\b{name}\b", message) is not None
        assert named is (name in refused), (name, message)
    assert {"write", "merge", "turn record"}.isdisjoint(refused)  # they still work

    cli = run_cli("--root", str(kitchen.root), "reflect")
    assert cli.returncode != 0
    assert cli.stderr.decode().splitlines() == [f"error: {message}"]


# ---- init refuses a folder inside another store, in the core -----------------------------


def test_store_init_refuses_a_folder_inside_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outer = Store.init(tmp_path / "outer")
    inner = outer / "wiki" / "deep" / "inner"
    for make in (
        lambda: Store.init(inner),
        lambda: Store.init(inner, force=True),
        lambda: Memory.init(inner),
    ):
        with pytest.raises(Conflict, match=re.escape(str(outer))):
            make()
    assert not (outer / "wiki" / "deep").exists()  # nothing was made
    # A relative path is resolved first.
    monkeypatch.chdir(outer / "episodes")
    with pytest.raises(Conflict, match=re.escape(str(outer))):
        Store.init(Path("..") / "notes" / "sub")
    assert not (outer / "notes" / "sub").exists()
    # Beside the store (not under it) is fine, and so is re-running init on the store itself.
    assert is_store(Store.init(tmp_path / "beside"))
    assert Store.init(outer, force=True) == outer


def test_cli_init_inside_a_store_is_one_error_line(tmp_path: Path) -> None:
    outer = Store.init(tmp_path / "outer")
    for args, cwd in (
        (("init", str(outer / "wiki" / "inner")), None),
        (("init", "inner"), outer / "wiki"),
        (("--root", str(outer / "inner"), "init"), None),
    ):
        result = run_cli(*args, cwd=cwd)
        assert result.returncode != 0
        [line] = result.stderr.decode().splitlines()
        assert line.startswith("error: ") and f"inside the memdir store {outer}" in line
        assert result.stdout == b""
    assert not (outer / "wiki" / "inner").exists() and not (outer / "inner").exists()


# ---- the default compactor's call count ---------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5])
def test_the_default_compactor_counts_calls_in_the_right_number(n: int) -> None:
    log = [{"tool": "grep", "args": {"pattern": f"p{i}"}, "result": "hit"} for i in range(n)]
    text = DefaultCompactor().compact(log, input="find it", output="found", max_chars=800)
    first = text.splitlines()[0]
    noun = "call" if n == 1 else "calls"
    assert first.startswith(f"- Tools ({n} {noun}): grep")
    assert "1 calls" not in text


def test_a_recorded_turn_with_one_call_says_call(mem: Memory) -> None:
    rec = mem.record_turn(thread="t", input="x", worklog=[{"tool": "grep", "result": "1"}])
    compact = mem.turn_show(rec.id).compact
    assert "Tools (1 call): grep" in compact and "calls" not in compact.splitlines()[0]


def test_merge_records_its_actor_on_every_surface(kitchen: Memory) -> None:
    kitchen.write("wiki/page.md", "# Page\n")
    unnamed = kitchen.merge("wiki/page.md", episode="ep-1")
    named = kitchen.merge("wiki/page.md", episode="ep-2", actor="planner")
    assert unnamed["entry"]["actor"] == "anonymous" and named["entry"]["actor"] == "planner"


def test_merge_matches_the_entries_already_there_as_the_memory_report_does(
    kitchen: Memory,
) -> None:
    # merged-from given as one mapping (not a list), and a path written with backslashes.
    kitchen.write("wiki/one.md", "---\nmerged-from: {type: episode, id: ep-1}\n---\n# One\n")
    kitchen.write(
        "wiki/two.md",
        "---\nmerged-from:\n- {type: episode, path: 'episodes\\a.md'}\n---\n# Two\n",
    )
    assert kitchen.merge("wiki/one.md", episode="ep-1")["added"] is False
    assert kitchen.merge("wiki/two.md", path="episodes/a.md")["added"] is False
    assert frontmatter.parse(kitchen.read("wiki/one.md").content).fm["merged-from"] == {
        "type": "episode",
        "id": "ep-1",
    }


def test_refine_resolves_a_wikilink_in_another_case_as_obsidian_does(kitchen: Memory) -> None:
    kitchen.ingest([("bread.md", BREAD)])
    [article] = [p for p in kitchen.consolidate()["articles"] if "/kitchen/" in p]
    slug = Path(article).stem
    note = kitchen.root / Path(article).with_name("see-also.md")
    body = f"# See also\n\n[[{slug.upper()}]] and [[{slug}-missing]]\n"
    note.write_text(frontmatter.render({"type": "concept", "title": "See also"}, body))
    broken = kitchen.refine()["components"]["broken_link"]["items"]
    assert any(f"{slug}-missing" in item for item in broken)
    assert not any(f"[[{slug.upper()}]]" in item for item in broken)


def test_forgetting_twice_keeps_the_first_valid_until_and_reason(kitchen: Memory) -> None:
    kitchen.write("wiki/old.md", "# Old\n")
    first = kitchen.forget("wiki/old.md", reason="replaced by the runbook")
    again = kitchen.forget("wiki/old.md", reason="another reason")
    fm = frontmatter.parse(kitchen.read("wiki/old.md").content).fm
    assert (first["already"], again["already"]) == (False, True)
    assert again["valid_until"] == first["valid_until"] == str(fm["valid_until"])
    assert fm["superseded_reason"] == "replaced by the runbook"


def test_core_errors_do_not_name_cli_flags(kitchen: Memory) -> None:
    """HTTP and MCP callers see these messages too."""
    from memdir.errors import InvalidInput, UnsafePath

    with pytest.raises(InvalidInput) as merge:
        kitchen.merge("wiki/page.md")
    with pytest.raises(InvalidInput) as walk:
        kitchen.ancestors("nope")
    with pytest.raises(UnsafePath) as dots:
        kitchen.write("wiki/../wiki/x.md", "# X\n")
    for raised in (merge, walk, dots):
        assert "--" not in str(raised.value)
    assert "26-character" in str(walk.value)
    assert "'..'" in str(dots.value)


@pytest.mark.parametrize(("name", "scope"), [("Bad Name", "x"), ("ok", "   ")])
def test_a_bad_bundle_is_the_callers_input(kitchen: Memory, name: str, scope: str) -> None:
    """It was a ProgramError, a config error: HTTP answered 500 for the caller's typo."""
    from memdir.errors import InvalidInput

    before = (kitchen.root / "PROGRAM.md").read_bytes()
    with pytest.raises(InvalidInput) as err:
        kitchen.bundle_add(name, scope)
    assert err.value.http_status == 400
    assert (kitchen.root / "PROGRAM.md").read_bytes() == before


def test_open_refuses_settings_and_overrides_together(kitchen: Memory) -> None:
    from memdir.errors import InvalidInput

    with pytest.raises(InvalidInput, match="not both"):
        Memory.open(kitchen.root, settings=kitchen.settings, overrides={"search": {"rrf_k": 5}})
    with Memory.open(kitchen.root, settings=kitchen.settings) as again:
        assert again.settings is kitchen.settings
