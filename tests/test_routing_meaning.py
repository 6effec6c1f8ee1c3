"""Routing by meaning: paraphrases filed, everyday text quarantined with its scores, every
placement recorded, and the lexical router used (and said) when embeddings are off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_cli
from memdir.doc import frontmatter
from memdir.engine import meaning
from memdir.engine.program import Bundle
from memdir.files.store import Store
from memdir.service import Memory

BUNDLES = [
    ("bees", "Keeping honey bees in the two hives at the bottom of the garden"),
    ("bike", "Maintaining my road bicycle"),
]
# Notes that use scope words, notes that paraphrase them, and everyday notes about nothing a
# bundle is for (one shares a word with a scope: "the bottom of the garden").
LITERAL = {
    "hive-check.md": "# Hive check\n\nOpened both hives today. The bees in the left hive are "
    "calm and the honey super is half full. Saw the queen on the third frame.\n",
    "puncture.md": "# Puncture\n\nThe road bicycle's rear tyre went flat on the way to work. "
    "Patched the tube at lunch and pumped it back to 80 psi; new tyres are due soon.\n",
    "chain.md": "# Chain wear\n\nMeasured the chain on the road bicycle: 0.75 stretch, so it "
    "is time for a new one before it wears the cassette.\n",
}
PARAPHRASE = {
    "swarm.md": "# A swarm in May\n\nA cloud of them left the left box around noon and "
    "settled on the apple tree. Shook the cluster into a spare brood box at dusk and they "
    "stayed. Next spring add space earlier so they do not feel crowded.\n",
    "tyres.md": "# New tyres\n\nFitted 28 mm tubeless tyres front and rear at 70 psi. The "
    "ride on rough lanes is much smoother and I had no flats on the Sunday club ride.\n",
}
EVERYDAY = {
    "film.md": "# Film night\n\nWatched an old film with friends on Friday and argued about "
    "the ending until midnight. Nobody agreed, as usual.\n",
    "party.md": "# Party\n\nThe neighbours had a party at the bottom of the garden until two "
    "in the morning. We could hear every song through the window.\n",
}


def _store(tmp_path: Path, **overrides: dict[str, object]) -> Memory:
    root = Store.init(tmp_path / "store")
    mem = Memory.open(root, overrides=dict(overrides))
    for name, scope in BUNDLES:
        mem.bundle_add(name, scope)
    return mem


def _where(mem: Memory) -> dict[str, set[str]]:
    """Note file name -> bundles of the articles that merged it ({"quarantine"} if held)."""
    out: dict[str, set[str]] = {}
    for path in (mem.root / "wiki").rglob("*.md"):
        fm = frontmatter.parse(path.read_text()).fm
        for item in fm.get("merged-from") or []:
            out.setdefault(item["path"].split("-", 1)[1], set()).add(fm["bundle"])
    for path in (mem.root / "quarantine").rglob("*.md"):
        out.setdefault(path.name.split("-", 1)[1], set()).add("quarantine")
    return out


def test_paraphrases_are_filed_and_everyday_notes_quarantined(tmp_path: Path) -> None:
    mem = _store(tmp_path)
    try:
        mem.ingest(list({**LITERAL, **PARAPHRASE, **EVERYDAY}.items()))
        result = mem.consolidate()
        where = _where(mem)
        assert where["hive-check.md"] == {"bees"} and where["swarm.md"] == {"bees"}
        assert where["chain.md"] == {"bike"} and where["tyres.md"] == {"bike"}
        assert where["film.md"] == {"quarantine"} and where["party.md"] == {"quarantine"}
        assert result["router"] == {"method": "meaning", "note": ""}
        by_source = {p["source"].split("-", 1)[1]: p for p in result["placements"]}
        assert set(by_source) == set(LITERAL) | set(PARAPHRASE) | set(EVERYDAY)
        swarm = by_source["swarm.md"]
        assert swarm["router"] == "meaning" and swarm["bundles"] == ["bees"]
        [placed] = swarm["placed"]
        assert placed["bundle"] == "bees" and (mem.root / placed["article"]).is_file()
        assert set(swarm["meaning"]) == {"bees", "bike"} and "background" in swarm
        party = by_source["party.md"]
        assert party["bundles"] == [] and party["placed"] == []
        assert party["quarantined"].startswith("quarantine/")
        assert "no bundle fits by meaning" in party["reason"]
        assert f"{party['background']:.2f}" in party["reason"]
        fm = frontmatter.parse((mem.root / party["quarantined"]).read_text()).fm
        assert set(fm["route_scores"]) == {"bees", "bike"}
    finally:
        mem.close()


def test_the_lexical_router_is_used_and_said_when_embeddings_are_off(tmp_path: Path) -> None:
    mem = _store(tmp_path, embeddings={"enabled": False})
    try:
        mem.ingest(list(PARAPHRASE.items()))
        result = mem.consolidate()
        assert result["router"]["method"] == "lexical"
        assert "embeddings.enabled is false" in result["router"]["note"]
        assert {p["router"] for p in result["placements"]} == {"lexical"}
        # Words alone do not see that a swarm in the left box is about the bees.
        assert _where(mem)["swarm.md"] == {"quarantine"}
    finally:
        mem.close()
    (mem.root / "inbox" / "extra.md").write_text(LITERAL["chain.md"])
    done = run_cli("consolidate", cwd=mem.root, env={"MEMDIR_EMBEDDINGS_ENABLED": "false"})
    assert done.returncode == 0, done.stderr
    assert b"routing by words only: embeddings.enabled is false" in done.stdout
    done = run_cli("consolidate", cwd=mem.root)
    assert b"routing by words only" not in done.stdout


def test_consolidate_json_lists_every_placement(tmp_path: Path) -> None:
    mem = _store(tmp_path)
    root = mem.root
    try:
        mem.ingest([("hive-check.md", LITERAL["hive-check.md"]), ("film.md", EVERYDAY["film.md"])])
    finally:
        mem.close()
    done = run_cli("consolidate", "--json", cwd=root)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    placed = {p["source"].split("-", 1)[1]: p for p in out["placements"]}
    assert placed["hive-check.md"]["placed"][0]["action"] == "new"
    assert placed["film.md"]["quarantined"] == out["quarantined"][0]["to"]


def test_a_second_bundle_only_when_nearly_as_strong() -> None:
    vectors = {
        "a": [1.0, 0.0, 0.0],
        "b": [0.0, 1.0, 0.0],
        "x": [0.0, 0.0, 1.0],
        "both": [0.7, 0.7, 0.14],
        "mostly-a": [0.9, 0.3, 0.3],
    }

    def embed(texts: list[str]) -> object:
        np = pytest.importorskip("numpy")
        rows = np.array([vectors.get(t, vectors["x"]) for t in texts], dtype=np.float32)
        return rows / np.linalg.norm(rows, axis=1, keepdims=True)

    bundles = [Bundle("one", "a"), Bundle("two", "b")]
    both = meaning.route_all(embed, bundles, [("s1", "both")], {}, meaning.Tuning())
    assert set(both["s1"].bundles) == {"one", "two"}
    one = meaning.route_all(embed, bundles, [("s2", "mostly-a")], {}, meaning.Tuning())
    assert one["s2"].bundles == ("one",)
    strict = meaning.route_all(embed, bundles, [("s1", "both")], {}, meaning.Tuning(margin=2.0))
    assert strict["s1"].quarantined and "margin 2.00" in strict["s1"].reason


def test_what_the_router_embeds_names_no_source_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A citation holds the source's id, which is random: embedded with it, the same notes
    # gave another article vector in each store and were routed and updated differently
    # from one run to the next (a note merged into an article in one run, not the next).
    real = meaning.embedder_for
    seen: list[str] = []

    def recording(settings: object, *, purpose: str = "routing") -> tuple[object, str]:
        embed, why = real(settings, purpose=purpose)
        if embed is None:
            return None, why

        def embed_and_note(texts: list[str]) -> object:
            seen.extend(texts)
            return embed(texts)

        return embed_and_note, why

    monkeypatch.setattr(meaning, "embedder_for", recording)
    mem = _store(tmp_path)
    try:
        mem.ingest([("hive-check.md", LITERAL["hive-check.md"]), ("chain.md", LITERAL["chain.md"])])
        mem.consolidate()
        seen.clear()
        later = "# Hive check again\n\nOpened both hives today. The honey super on the left "
        later += "hive is 3 frames full now and the bees are calm.\n"
        mem.ingest([("later.md", later)])
        result = mem.consolidate()
    finally:
        mem.close()
    assert result["placements"][0]["bundles"] == ["bees"]
    assert any("honey super" in t for t in seen)  # the articles were compared ...
    assert not [t for t in seen if "[^src-" in t or "inbox/" in t]  # ... without citations
