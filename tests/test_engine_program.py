"""PROGRAM.md and HARNESS.md parsing, article validation, hash pinning."""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import BREAD, run_cli
from memdir.engine import harness, program
from memdir.errors import ConfigError, HarnessChanged, NotFound, ProgramError
from memdir.service import Memory
from memdir.settings import pin_harness, pinned_harness


def template(name: str) -> str:
    return resources.files("memdir").joinpath("templates", name).read_text(encoding="utf-8")


def test_template_program_parses_with_documented_values() -> None:
    prog = program.parse(template("PROGRAM.md"))
    assert prog.identity.startswith("This memory belongs to an agent")
    assert prog.bundles == ()
    assert prog.budgets.article_bodies == 3
    assert prog.thresholds.routing == 0.15
    assert prog.thresholds.quarantine == 0.05
    assert prog.snapshot.token_cap == 1500


def test_bundle_add_replace_remove_round_trip() -> None:
    text = template("PROGRAM.md")
    text = program.add_bundle(text, "cooking", "recipes, baking bread, fermentation")
    text = program.add_bundle(text, "garden", "vegetables,   soil and   compost")
    prog = program.parse(text)
    assert [(b.name, b.scope) for b in prog.bundles] == [
        ("cooking", "recipes, baking bread, fermentation"),
        ("garden", "vegetables, soil and compost"),
    ]
    text = program.add_bundle(text, "cooking", "knife skills")
    assert program.parse(text).bundle("cooking") == program.Bundle("cooking", "knife skills")
    text = program.remove_bundle(text, "cooking")
    assert [b.name for b in program.parse(text).bundles] == ["garden"]
    with pytest.raises(NotFound):
        program.remove_bundle(text, "cooking")
    assert "## Notes" in text  # the rest of the file is kept


@pytest.mark.parametrize(
    ("lines", "line", "fragment"),
    [
        (["## Budgets", "- article_bodies: many"], 2, "must be an integer"),
        (["## Budgets", "", "- sideways: 3"], 3, "unknown key 'sideways'"),
        (["## Thresholds", "- routing: 1.5"], 2, "between 0.0 and 1.0"),
        (["## Bundles", "this is prose"], 2, "expected '- key: value'"),
        (["## Bundles", "- Bad Name: x"], 2, "bundle name"),
        (["## Bundles", "- a: "], 2, "empty scope"),
        (["## Bundles", "- a: x", "- a: y"], 3, "repeats"),
        (["intro", "## Budgetz", "- a: 1"], 2, "unknown section"),
        (["## Snapshot", "- token_cap: 5"], 2, "at least 100"),
    ],
)
def test_bad_program_points_at_the_line(lines: list[str], line: int, fragment: str) -> None:
    with pytest.raises(ProgramError) as err:
        program.parse("\n".join(lines) + "\n")
    assert f"PROGRAM.md:{line}:" in str(err.value)
    assert fragment in str(err.value)


def test_settings_that_differ_from_default_win_over_the_file() -> None:
    from memdir.settings import EngineSettings

    prog = program.parse("## Thresholds\n- quarantine: 0.3\n- distill_age_days: 7\n")
    same = program.with_settings(prog, EngineSettings())
    assert same.thresholds.quarantine == 0.3
    assert same.thresholds.distill_age_days == 7
    changed = program.with_settings(
        prog, EngineSettings(distill_age_days=2, snapshot_token_cap=900)
    )
    assert changed.thresholds.distill_age_days == 2
    assert changed.snapshot.token_cap == 900
    assert changed.thresholds.quarantine == 0.3


@given(
    st.lists(
        st.tuples(
            st.from_regex(r"[a-z0-9][a-z0-9_-]{0,10}", fullmatch=True),
            st.text(alphabet=st.characters(blacklist_categories=["Cc", "Cs", "Zl", "Zp"]))
            .map(lambda s: " ".join(s.split()))
            .filter(bool),
        ),
        max_size=5,
        unique_by=lambda t: t[0],
    )
)
def test_added_bundles_parse_back(bundles: list[tuple[str, str]]) -> None:
    text = template("PROGRAM.md")
    for name, scope in bundles:
        text = program.add_bundle(text, name, scope)
    assert [(b.name, b.scope) for b in program.parse(text).bundles] == bundles


# ---- harness ----


def article(**overrides: object) -> tuple[dict[str, object], str]:
    fm: dict[str, object] = {
        "type": "concept",
        "title": "Sourdough starter",
        "description": "How a starter is kept alive.",
        "bundle": "cooking",
        "topic": "bread",
        "sources": [{"id": "src-1", "resource": "inbox/a.md"}],
        "generated": {"by": "memdir/extractive", "at": "2026-01-01T00:00:00Z"},
        "status": "draft",
    }
    fm.update(overrides)
    body = (
        "# Sourdough starter\n\n## Key points\n\n"
        "- A starter is fed flour and water daily.[^src-1]\n"
        "\n## Takeaways\n\n- Feed it.\n\n## Related\n\n- none yet\n\n[^src-1]: inbox/a.md\n"
    )
    return fm, body


def test_template_harness_parses() -> None:
    h = harness.parse(template("HARNESS.md"))
    assert set(h.defects) == set(harness.KNOWN_DEFECTS)
    assert h.required_sections == ("Key points", "Takeaways", "Related")
    assert h.cited_sections == ("Key points",)
    assert "type" in h.required_keys and "sources" in h.required_keys
    assert len(h.rules) >= 3
    assert len(h.sha256) == 64


def test_valid_article_passes_and_each_defect_is_named() -> None:
    h = harness.parse(template("HARNESS.md"))
    fm, body = article()
    assert harness.validate_article(h, fm, body) == []
    fm2, _ = article(status="final", generated="yesterday")
    del fm2["topic"]
    problems = harness.validate_article(h, fm2, body)
    assert "missing required key 'topic'" in problems
    assert any("status 'final'" in p for p in problems)
    assert any("'generated' must be" in p for p in problems)
    uncited = body.replace("daily.[^src-1]", "daily.")
    assert any("uncited claim" in p for p in harness.validate_article(h, fm, uncited))
    dangling = body.replace("daily.[^src-1]", "daily.[^src-9]")
    assert "citation [^src-9] matches no sources[].id" in harness.validate_article(h, fm, dangling)
    nodef = body.replace("[^src-1]: inbox/a.md\n", "")
    assert "citation [^src-1] has no footnote definition" in harness.validate_article(h, fm, nodef)
    nosection = body.replace("## Takeaways", "## Afterwords")
    assert "missing section '## Takeaways'" in harness.validate_article(h, fm, nosection)


def test_harness_unknown_defect_is_an_error_with_line() -> None:
    with pytest.raises(ConfigError, match=r"HARNESS.md:4: unknown defect 'typo'"):
        harness.parse("## Article schema\n- type: concept\n## Defects\n- typo: x\n")


def test_pin_check_and_accept(tmp_path: Path) -> None:
    (tmp_path / ".memdir").mkdir()
    config = tmp_path / ".memdir" / "config.toml"
    config.write_text('[engine]\n# writer = "extractive"\n', encoding="utf-8")
    (tmp_path / "HARNESS.md").write_text(template("HARNESS.md"), encoding="utf-8")
    first = harness.check(tmp_path)  # pins on first use
    assert pinned_harness(tmp_path) == first.sha256
    assert config.read_text(encoding="utf-8").startswith("[engine]\n")
    harness.check(tmp_path)  # unchanged: fine
    with open(tmp_path / "HARNESS.md", "a", encoding="utf-8") as fh:
        fh.write("- A new rule typed by hand.\n")
    with pytest.raises(HarnessChanged):
        harness.check(tmp_path)
    new = harness.load(tmp_path)
    pin_harness(tmp_path, new.sha256)
    assert harness.check(tmp_path).sha256 == new.sha256
    assert config.read_text(encoding="utf-8").count("[harness]") == 1


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


@pytest.mark.parametrize(("name", "scope"), [("Bad Name", "x"), ("ok", "   ")])
def test_a_bad_bundle_is_the_callers_input(kitchen: Memory, name: str, scope: str) -> None:
    """It was a ProgramError, a config error: HTTP answered 500 for the caller's typo."""
    from memdir.errors import InvalidInput

    before = (kitchen.root / "PROGRAM.md").read_bytes()
    with pytest.raises(InvalidInput) as err:
        kitchen.bundle_add(name, scope)
    assert err.value.http_status == 400
    assert (kitchen.root / "PROGRAM.md").read_bytes() == before
