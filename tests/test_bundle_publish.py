"""bundle publish: a bundle as a standalone OKF v0.2 git repository with its own history,
published into real bare repositories and folders, cloned and audited on its own."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import git, run_cli
from memdir.doc import frontmatter
from memdir.errors import Conflict, InvalidInput, NotFound, UnsafePath
from memdir.files.store import Store
from memdir.service import Memory

CRUST = (
    "# Bread crust\n\nA hot oven gives sourdough bread a dark crust. Steam in the first "
    "minutes of baking keeps the crust thin and crisp.\n"
)
YEAST = "# Fresh yeast\n\nFresh yeast in the bread dough doubles the rise in a warm oven.\n"
COMPOST = "# Compost\n\nCompost for tomatoes needs turning every week in the garden.\n"


@pytest.fixture
def two(tmp_path: Path) -> Iterator[Memory]:
    """kitchen (one article, bread crust) and garden (one article, compost)."""
    memory = Memory.open(Store.init(tmp_path / "store"))
    memory.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, oven")
    memory.bundle_add("garden", "tomatoes, compost, watering plants, garden beds")
    memory.ingest([("crust.md", CRUST)])
    memory.ingest([("compost.md", COMPOST)])
    memory.consolidate()
    yield memory
    memory.close()


def bare(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def clone(url: Path, into: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(url), str(into)], check=True)
    return into


def history(root: Path, *paths: str) -> list[tuple[str, ...]]:
    """(author name, author email, author date, committer date, message) per commit, oldest
    first."""
    out = git(root, "log", "--reverse", "--format=%an%x1f%ae%x1f%ad%x1f%cd%x1f%B%x1e", "--", *paths)
    return [tuple(r.strip("\n").split("\x1f")) for r in out.split("\x1e") if r.strip()]


def article(mem: Memory, bundle: str) -> str:
    return next(p for p in git(mem.root, "ls-files", f"wiki/{bundle}").split() if p.count("/") == 3)


def test_a_published_bundle_stands_on_its_own(two: Memory, tmp_path: Path) -> None:
    remote = bare(tmp_path / "kitchen.git")
    result = two.bundle_publish("kitchen", str(remote))
    copy = clone(remote, tmp_path / "clone")

    # The history is the bundle's own: one commit per store commit that touched it.
    assert history(copy) == history(two.root, "wiki/kitchen")
    assert result["commits"] == len(history(copy)) and not result["incremental"]
    # Every file is the store's, byte for byte, and its sources travel with it.
    rel = article(two, "kitchen")
    published = (copy / rel.split("/", 2)[2]).read_bytes()
    assert published == (two.root / rel).read_bytes()
    fm = frontmatter.parse(published.decode()).fm
    for source in fm["sources"]:
        carried = copy / source["resource"]
        assert carried.read_bytes() == (two.root / source["resource"]).read_bytes()
    assert not (copy / "wiki").exists() and not any(copy.glob("**/compost*"))
    # The clone, checked on its own, conforms and every reference resolves.
    assert Memory.bundle_audit(copy) == []
    assert run_cli("bundle", "audit", str(copy)).returncode == 0
    assert frontmatter.parse((copy / "index.md").read_text()).fm["okf_version"] == "0.2"


def test_a_second_publish_adds_only_the_new_commit(two: Memory, tmp_path: Path) -> None:
    remote = bare(tmp_path / "kitchen.git")
    first = two.bundle_publish("kitchen", str(remote))
    assert two.bundle_publish("kitchen", str(remote))["commits"] == 0  # nothing new
    two.ingest([("yeast.md", YEAST)])
    two.consolidate()
    second = two.bundle_publish("kitchen", str(remote))
    assert second["incremental"] and second["commits"] == 1
    assert git(remote, "rev-parse", "main^").strip() == first["head"]
    assert git(remote, "rev-list", "--count", "main").strip() == str(first["commits"] + 1)
    store_head = git(two.root, "rev-parse", "HEAD").strip()
    note = git(remote, "notes", "--ref=refs/notes/memdir-publish", "show", "main")
    assert f"store-commit: {store_head}" in note and "bundle: kitchen" in note
    assert history(remote)[-1] == history(two.root)[-1]
    copy = clone(remote, tmp_path / "clone")
    assert Memory.bundle_audit(copy) == []
    assert len(json.loads((copy / "relations.json").read_text())["sources"]) == 2


def test_a_replay_gives_the_same_commits_in_a_folder(two: Memory, tmp_path: Path) -> None:
    remote = bare(tmp_path / "kitchen.git")
    folder = tmp_path / "out" / "kitchen"
    a = two.bundle_publish("kitchen", str(remote))
    b = two.bundle_publish("kitchen", str(folder))
    assert a["head"] == b["head"]  # same author, committer, dates, message and tree
    assert git(folder, "status", "--porcelain") == ""
    assert (folder / "index.md").is_file() and Memory.bundle_audit(folder) == []


def test_cross_bundle_relations_resolve_and_travel_as_a_list(two: Memory, tmp_path: Path) -> None:
    rel = article(two, "kitchen")
    garden = article(two, "garden").split("/", 1)[1]  # garden/<topic>/<slug>.md
    text = (two.root / rel).read_text()
    parsed = frontmatter.parse(text)
    fm = dict(parsed.fm, related=[f"../{garden}"])
    two.write(rel, frontmatter.render(fm, parsed.body))
    audit = two.refine()
    assert audit["okf"]["kitchen"] == "conformant"
    assert not [i for i in audit["components"]["broken_link"]["items"] if "related" in i]

    remote = bare(tmp_path / "kitchen.git")
    assert two.bundle_publish("kitchen", str(remote))["relations"] == 1
    copy = clone(remote, tmp_path / "clone")
    listed = json.loads((copy / "relations.json").read_text())["relations"]
    assert listed == [
        {
            "from": rel.split("/", 2)[2],
            "kind": "related",
            "to": f"../{garden}",
            "bundle": "garden",
            "path": garden.split("/", 1)[1],
        }
    ]
    assert Memory.bundle_audit(copy) == []
    (copy / "relations.json").unlink()  # without the list the relation resolves nowhere
    assert any("does not resolve" in p for p in Memory.bundle_audit(copy))

    fm["related"] = ["../garden/nowhere/gone.md"]
    two.write(rel, frontmatter.render(fm, parsed.body))
    audit = two.refine()
    assert any("gone.md" in v for v in audit["okf"]["kitchen"])
    assert any("gone.md" in i for i in audit["components"]["broken_link"]["items"])


def test_hostile_sources_are_not_carried(two: Memory, tmp_path: Path) -> None:
    rel = article(two, "kitchen")
    parsed = frontmatter.parse((two.root / rel).read_text())
    hostile = ["../../etc/passwd", "/etc/passwd", ".memdir/config.toml", ".git/config"]
    sources = parsed.fm["sources"] + [
        {"id": f"src-x{i}", "resource": r} for i, r in enumerate(hostile)
    ]
    two.write(rel, frontmatter.render(dict(parsed.fm, sources=sources), parsed.body))
    remote = bare(tmp_path / "k.git")
    two.bundle_publish("kitchen", str(remote))
    copy = clone(remote, tmp_path / "clone")
    files = git(copy, "ls-files").split()
    assert not [f for f in files if "passwd" in f or f.startswith(".")]
    problems = Memory.bundle_audit(copy)
    assert len(problems) == len(hostile) and all("does not resolve" in p for p in problems)


@pytest.mark.parametrize(
    "name", ["../garden", "kitchen/../garden", ".git", "Kitchen", "kitchen\n", "", "-x"]
)
def test_hostile_bundle_names_are_refused(two: Memory, tmp_path: Path, name: str) -> None:
    with pytest.raises(InvalidInput):
        two.bundle_publish(name, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_unknown_bundles_and_hostile_targets_are_refused(two: Memory, tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        two.bundle_publish("nope", str(tmp_path / "out"))
    with pytest.raises(UnsafePath):
        two.bundle_publish("kitchen", "--upload-pack=touch /tmp/x")
    with pytest.raises(UnsafePath):
        two.bundle_publish("kitchen", str(two.root / "published"))
    with pytest.raises(UnsafePath):
        two.bundle_publish("kitchen", str(two.root))
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput):
        two.bundle_publish("kitchen", str(tmp_path / "file"))


def test_a_target_that_is_not_a_previous_publish_is_refused(two: Memory, tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.md").write_text("mine\n")
    with pytest.raises(Conflict, match="not empty"):
        two.bundle_publish("kitchen", str(busy))
    assert [p.name for p in busy.iterdir()] == ["notes.md"]

    other = tmp_path / "other"  # a git repository with a history of its own
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "a.md").write_text("a\n")
    git(other, "add", "a.md")
    git(other, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "-m", "mine")
    with pytest.raises(Conflict, match="not a memdir publish"):
        two.bundle_publish("kitchen", str(other))
    assert git(other, "rev-list", "--count", "main").strip() == "1"

    remote = bare(tmp_path / "garden.git")  # a publish of another bundle
    two.bundle_publish("garden", str(remote))
    head = git(remote, "rev-parse", "main")
    with pytest.raises(Conflict, match="publish of 'garden'"):
        two.bundle_publish("kitchen", str(remote))
    assert git(remote, "rev-parse", "main") == head

    foreign = bare(tmp_path / "foreign.git")  # a bare repository with other commits
    subprocess.run(["git", "-C", str(other), "push", "-q", str(foreign), "main"], check=True)
    with pytest.raises(Conflict, match="not empty and not a previous publish"):
        two.bundle_publish("kitchen", str(foreign))


def test_a_folder_with_edits_of_its_own_is_refused(two: Memory, tmp_path: Path) -> None:
    folder = tmp_path / "kitchen"
    two.bundle_publish("kitchen", str(folder))
    (folder / "index.md").write_text("# mine\n")
    two.ingest([("yeast.md", YEAST)])
    two.consolidate()
    with pytest.raises(Conflict, match="changes of its own"):
        two.bundle_publish("kitchen", str(folder))
    assert (folder / "index.md").read_text() == "# mine\n"


def test_a_folder_on_another_branch_is_refused(two: Memory, tmp_path: Path) -> None:
    folder = tmp_path / "kitchen"
    two.bundle_publish("kitchen", str(folder))
    git(folder, "checkout", "-q", "-b", "mine")
    with pytest.raises(Conflict, match="another branch"):
        two.bundle_publish("kitchen", str(folder))
    git(folder, "checkout", "-q", "--detach")
    with pytest.raises(Conflict, match="another branch"):
        two.bundle_publish("kitchen", str(folder))
    assert git(folder, "rev-parse", "mine") == git(folder, "rev-parse", "main")


def test_a_publish_killed_before_its_checkout_is_finished(two: Memory, tmp_path: Path) -> None:
    folder = tmp_path / "kitchen"
    two.bundle_publish("kitchen", str(folder))
    two.ingest([("yeast.md", YEAST)])
    two.consolidate()
    remote = bare(tmp_path / "k.git")
    new = two.bundle_publish("kitchen", str(remote))["head"]
    # What a kill between the import and the checkout leaves: the branch moved, the files not.
    git(folder, "fetch", "-q", str(remote), "main")
    git(folder, "update-ref", "refs/heads/main", new)
    git(folder, "fetch", "-q", str(remote), "+refs/notes/memdir-publish:refs/notes/memdir-publish")
    assert git(folder, "status", "--porcelain")
    result = two.bundle_publish("kitchen", str(folder))
    assert result["commits"] == 0 and result["head"] == new
    assert git(folder, "status", "--porcelain") == ""
    assert Memory.bundle_audit(folder) == []


def test_two_publishes_at_once_publish_each_commit_once(two: Memory, tmp_path: Path) -> None:
    remote = bare(tmp_path / "k.git")
    results: list[dict[str, object]] = []
    threads = [
        threading.Thread(target=lambda: results.append(two.bundle_publish("kitchen", str(remote))))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(int(str(r["commits"])) for r in results)[0] == 0
    assert git(remote, "rev-list", "--count", "main").strip() == str(
        len(history(two.root, "wiki/kitchen"))
    )


def test_the_cli_publishes_and_reports(two: Memory, tmp_path: Path) -> None:
    remote = bare(tmp_path / "k.git")
    two.close()
    out = run_cli("bundle", "publish", "kitchen", "--to", str(remote), "--json", cwd=two.root)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["head"] == git(remote, "rev-parse", "main").strip()
    again = run_cli("bundle", "publish", "kitchen", "--to", str(remote), cwd=two.root)
    assert again.returncode == 0 and b"0 new commit(s)" in again.stdout
    bad = run_cli("bundle", "publish", "../kitchen", "--to", str(remote), cwd=two.root)
    assert bad.returncode == 2 and bad.stderr.startswith(b"error:")


def test_a_bundle_of_turn_facts_carries_its_thread_and_turns(tmp_path: Path) -> None:
    mem = Memory.open(Store.init(tmp_path / "store"), overrides={"embeddings": {"enabled": False}})
    mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, oven")
    turn = mem.record_turn(
        thread="bread",
        input="How often should I feed the sourdough starter?",
        output="Feed the sourdough starter twice a day with flour and rye.",
    )
    assert mem.consolidate(turns=True)["turns"]["articles"]
    remote = bare(tmp_path / "k.git")
    mem.bundle_publish("kitchen", str(remote))
    mem.close()
    copy = clone(remote, tmp_path / "clone")
    assert (copy / "threads" / "bread.md").is_file()
    assert [p.name for p in copy.glob("episodes/turns/**/*.md")] == [f"{turn.id}.md"]
    assert Memory.bundle_audit(copy) == []
