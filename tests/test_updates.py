"""New material updates the wiki: the article a source is about is updated (not doubled), a
changed fact supersedes the older claim, a near-duplicate adds nothing, an edited source is
consolidated again into its article."""

from __future__ import annotations

from pathlib import Path

import pytest

from memdir.doc import frontmatter
from memdir.engine import consolidate as consolidating
from memdir.engine import placing, updates
from memdir.files.store import Store
from memdir.service import Memory

SCOPE = "The home network: router, wifi and the devices on it"
OLD = (
    "---\ndate: 2026-01-15\n---\n# Wifi channel\n\nThe 5 GHz wifi kept dropping in the "
    "evenings. I moved the 5 GHz wifi to channel 36 in the router settings. Video calls are "
    "smooth again.\n"
)
NEW = (
    "---\ndate: 2026-03-20\n---\n# Wifi channel again\n\nThe evening drops came back on the "
    "5 GHz wifi. I moved the 5 GHz wifi to channel 149 in the router settings. If it fills up "
    "too, let the router pick a channel automatically.\n"
)
PRINTER = (
    "# Printer\n\nThe printer in the study has a fixed address, 192.168.1.40, reserved in the "
    "router so it stops vanishing from the laptops.\n"
)


@pytest.fixture(params=[True, False], ids=["meaning", "words"])
def net(request: pytest.FixtureRequest, tmp_path: Path) -> Memory:
    root = Store.init(tmp_path / "store")
    mem = Memory.open(root, overrides={"embeddings": {"enabled": request.param}})
    mem.bundle_add("network", SCOPE)
    request.addfinalizer(mem.close)
    return mem


def _articles(mem: Memory) -> list[Path]:
    return [p for p in (mem.root / "wiki").rglob("*.md") if p.name not in ("index.md", "log.md")]


def test_a_changed_fact_updates_the_article_and_supersedes_the_old_claim(net: Memory) -> None:
    net.ingest([("wifi.md", OLD), ("printer.md", PRINTER)])
    first = net.consolidate()
    assert len(first["articles"]) == 2
    net.ingest([("wifi-again.md", NEW)])
    second = net.consolidate()
    [placement] = second["placements"]
    [placed] = placement["placed"]
    assert placed["action"] == "updated", placed
    wifi = placed["article"]
    assert wifi in first["articles"] and len(_articles(net)) == 2
    text = (net.root / wifi).read_text()
    fm = frontmatter.parse(text).fm
    assert [m["path"].split("-", 1)[1] for m in fm["merged-from"]] == [
        "wifi.md",
        "wifi-again.md",
    ]
    assert len(fm["sources"]) == 2
    [record] = fm["superseded"]
    old_id, new_id = (s["id"] for s in fm["sources"])
    assert (record["source"], record["superseded_by"]) == (old_id, new_id)
    assert record["date"][:4] == fm["updated"]["at"][:4]
    body = frontmatter.parse(text).body
    points, superseded = body.split("## Key points")[1].split("## Superseded")
    assert "channel 149" in points and "channel 36" not in points
    assert "channel 36" in superseded and f"superseded by [^{new_id}]" in superseded
    assert text.index("149") < text.index("36")  # the current value is met first
    answer = net.query("Which channel is the 5 GHz wifi on?")
    assert answer["found"] and answer["answers"][0]["path"] == wifi
    assert "149" in answer["answers"][0]["passages"][0]["text"]
    assert not any("channel 36" in p["text"] for p in answer["answers"][0]["passages"])
    assert net.refine()["drift"] == 0
    report = net.memory_report()
    assert not [e for e in report.unmerged if e.path.startswith("inbox/")]


def test_an_older_note_arriving_late_does_not_win(net: Memory) -> None:
    net.ingest([("wifi-again.md", NEW)])
    net.consolidate()
    net.ingest([("wifi.md", OLD)])
    [placement] = net.consolidate()["placements"]
    article = net.root / placement["placed"][0]["article"]
    body = frontmatter.parse(article.read_text()).body
    points, superseded = body.split("## Key points")[1].split("## Superseded")
    assert "channel 149" in points and "channel 36" in superseded


def test_a_near_duplicate_adds_no_claim(net: Memory) -> None:
    net.ingest([("wifi.md", OLD)])
    [article] = net.consolidate()["articles"]
    before = frontmatter.parse((net.root / article).read_text()).body.split("## Takeaways")[0]
    net.ingest([("wifi-copy.md", OLD)])
    [placement] = net.consolidate()["placements"]
    assert placement["placed"][0] | {"similarity": 0} == {
        "bundle": "network",
        "topic": article.split("/")[2],
        "article": article,
        "action": "duplicate",
        "similarity": 0,
    }
    parsed = frontmatter.parse((net.root / article).read_text())
    assert parsed.body.split("## Takeaways")[0] == before
    assert len(parsed.fm["merged-from"]) == 2 and len(_articles(net)) == 1


def test_an_edited_source_is_consolidated_again_into_its_article(net: Memory) -> None:
    [placed] = net.ingest([("wifi.md", OLD)])
    [article] = net.consolidate()["articles"]
    assert net.consolidate()["placements"] == []  # unchanged: nothing to do
    path = net.root / placed["path"]
    path.write_text(path.read_text().replace("channel 36", "channel 44"))
    [placement] = net.consolidate()["placements"]
    assert placement["router"] == "edited"
    assert placement["placed"][0]["article"] == article
    assert placement["placed"][0]["action"] == "updated"
    text = (net.root / article).read_text()
    points = frontmatter.parse(text).body.split("## Takeaways")[0]
    assert "channel 44" in points and "channel 36" not in points
    assert len(_articles(net)) == 1
    assert net.consolidate()["placements"] == []  # the new hash is recorded


def test_values_and_same_fact() -> None:
    assert updates.values("Council tax is £142 a month, band C, due on the 1st.") >= {"£142"}
    assert "70%" in updates.values("Hydration is down to 70% now.")
    assert "dl-90318" in updates.values("The new policy number is DL-90318.")
    old = "I moved the 5 GHz wifi to channel 36 in the router settings."
    new = "I moved the 5 GHz wifi to channel 149 in the router settings."
    assert updates.same_fact(old, new)
    assert not updates.same_fact(old, old)  # same value: not a change
    assert not updates.same_fact(old, "The printer has the fixed address 192.168.1.40.")
    assert not updates.same_fact("The wifi is fast.", "The wifi is slow.")  # words only


def test_an_article_naming_a_path_out_of_the_store_is_not_read(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "store")
    secret = tmp_path / "secret.md"
    secret.write_text("wifi channel router settings 5 GHz moved " * 20)
    mem = Memory.open(root, overrides={"embeddings": {"enabled": False}})
    try:
        mem.bundle_add("network", SCOPE)
        mem.ingest([("printer.md", PRINTER)])
        [article] = mem.consolidate()["articles"]
        path = root / article
        text = path.read_text()
        [resource] = [s["resource"] for s in frontmatter.parse(text).fm["sources"]]
        path.write_text(text.replace(f"resource: {resource}", "resource: inbox/../../secret.md"))
        items = consolidating.wiki.articles(root, "network")
        profile = placing.subject_profile(root, items[0])
        assert "channel router settings" not in profile and "Printer" in profile
    finally:
        mem.close()


def test_a_page_written_by_hand_in_a_bundle_is_not_updated(net: Memory) -> None:
    # A person's page in the bundle, with no article's frontmatter: a source on its subject
    # gets an article of its own, and the page stays byte for byte as it was.
    page = "# Wifi\n\nThe 5 GHz wifi sits on channel 36 in the router settings.\n"
    net.write("wiki/network/wifi.md", page, provenance="run:hand")
    page = (net.root / "wiki/network/wifi.md").read_text()  # with its derived-from
    net.ingest([("old.md", OLD)])
    filed = net.consolidate()["articles"]
    assert len(filed) == 1 and filed[0] != "wiki/network/wifi.md"
    assert (net.root / "wiki/network/wifi.md").read_text() == page


def test_value_kinds_and_a_change_said_in_other_words() -> None:
    kinds = {
        v: updates.kind(v) for v in updates.values("Doors at 7pm on 12 December, £8.50 for 2 kg.")
    }
    assert kinds["7pm"] == "time" and kinds["12december"] == "date"
    assert kinds["£8.50"] == "money" and kinds["2kg"] == "kg"
    old = "The winter concert is on 12 December at the cathedral."
    new = "They double booked us, so the carols evening has moved to 19 December."
    assert not updates.same_fact(old, new)  # too few words in common for the word rule
    assert updates.same_fact(old, new, similarity=0.6, floor=0.55)  # near by meaning
    assert not updates.same_fact(old, new, similarity=0.5, floor=0.55)
    # Near by meaning but no value of one kind changed: a time is not a date.
    assert not updates.same_fact(old, "Carols start at 7:30pm, doors at seven.", 0.9, 0.55)
    assert not updates.same_fact(old, old, 1.0, 0.55)


def test_merge_supersedes_the_claim_nearest_by_meaning() -> None:
    article = (
        "---\ntype: article\ntitle: Winter concert\nsources:\n- id: s1\n  resource: inbox/a.md\n"
        "  title: Winter concert\n  date: '2026-09-15'\n---\n# Winter concert\n\n## Key points\n\n"
        "- The winter concert is on 12 December at the cathedral. [^s1]\n"
        "- Black top and black trousers; red scarf provided. [^s1]\n\n"
        "[^s1]: inbox/a.md (Winter concert)\n"
    )
    new = "The carols evening has moved to 19 December."
    source = {"id": "s2", "resource": "inbox/b.md", "title": "Date changed", "date": "2026-10-20"}

    def similarity(texts: object, text: str) -> list[float]:
        return [0.7 if "concert" in t else 0.1 for t in texts]  # type: ignore[attr-defined]

    common = {
        "source": source,
        "merged_from": {"type": "ingest", "id": "b", "path": "inbox/b.md"},
        "key_points": [(new, ["s2"])],
        "description": new,
        "at": "2026-10-20T10:00:00Z",
        "actor": "test",
    }
    by_words = updates.merge(article, **common)  # type: ignore[arg-type]
    assert not by_words.superseded  # the words alone do not say it is one fact
    merged = updates.merge(article, **common, similarity=similarity, claim_similarity=0.55)  # type: ignore[arg-type]
    [record] = merged.superseded
    assert (record["source"], record["superseded_by"]) == ("s1", "s2")
    points, superseded = merged.text.split("## Key points")[1].split("## Superseded")
    assert points.strip().startswith("- The carols evening has moved to 19 December.")
    assert "12 December" in superseded and "red scarf" in points


def test_a_weekday_is_a_value_and_a_change_said_in_words_lowers_the_floor() -> None:
    assert updates.values("PE is on Tuesdays, games on thurs.") == {"tue", "thu"}
    assert updates.kind("tue") == "weekday"
    assert updates.changed_value("PE is on Tuesdays.", "Games lessons are on Thursday now.")
    assert not updates.changed_value("PE is on Tuesdays.", "PE is every Tuesday.")
    assert updates.says_changed("Completion now Fri 3 April.")
    assert updates.says_changed("The review is pushed to 9 Jan.")
    assert not updates.says_changed("Completion pencilled in for Fri 20 March.")
    assert updates.claim_floor("The test is now 9 April.", 0.55, 0.45) == 0.45
    assert updates.claim_floor("The test is on 28 April.", 0.55, 0.45) == 0.55
    article = (
        "---\ntype: article\ntitle: Podcast\nsources:\n- id: s1\n  resource: inbox/a.md\n"
        "  title: Podcast\n  date: '2026-01-10'\n---\n# Podcast\n\n## Key points\n\n"
        "- We record on Tuesday nights at Nadia's. [^s1]\n\n[^s1]: inbox/a.md (Podcast)\n"
    )
    source = {"id": "s2", "resource": "inbox/b.md", "title": "Nights", "date": "2026-02-01"}
    common = {
        "source": source,
        "merged_from": {"type": "ingest", "id": "b", "path": "inbox/b.md"},
        "description": "",
        "at": "2026-02-01T10:00:00Z",
        "actor": "test",
        "similarity": lambda texts, text: [0.5 for _ in texts],
        "claim_similarity": 0.55,
        "cue_similarity": 0.45,
    }
    # At cosine 0.5 the sentence that says it changed supersedes; one that does not, not.
    moved = updates.merge(
        article, key_points=[("Switched our sessions to Mondays.", ["s2"])], **common
    )  # type: ignore[arg-type]
    assert [r["superseded_by"] for r in moved.superseded] == ["s2"]
    assert (
        "## Superseded" in moved.text and "Tuesday nights" in moved.text.split("## Superseded")[1]
    )
    other = updates.merge(article, key_points=[("Nadia hosts on Mondays.", ["s2"])], **common)  # type: ignore[arg-type]
    assert not other.superseded
