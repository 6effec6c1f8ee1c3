"""Mode one: the context pack (content, reasons, dedup, budget, determinism)."""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memdir.cli import cli
from memdir.doc import tokencount as tokens
from memdir.errors import InvalidInput
from memdir.files.store import Store
from memdir.service import Memory

NO_GIT = {"store": {"git_commit": False}}


def run_cli(*args: str, stdin: bytes | None = None) -> SimpleNamespace:
    """The CLI in process (click's runner): exit code, stdout and stderr as bytes."""
    res = CliRunner().invoke(cli, list(args), input=stdin)
    return SimpleNamespace(
        returncode=res.exit_code, stdout=res.stdout_bytes, stderr=res.stderr_bytes
    )


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Memory, dict[str, str]]]:
    root = Store.init(tmp_path / "s", git=False)
    (root / "SNAPSHOT.md").write_text("---\ntype: snapshot\n---\nWe deploy with make deploy.\n")
    mem = Memory.open(root, overrides=NO_GIT)
    mem.write("wiki/ops/index.md", '---\nokf_version: "0.2"\n---\n* [Deploy](deploy.md) - how\n')
    ids: dict[str, str] = {}

    def rec(name: str, thread: str, user: str, parents: str = "", text: str = "") -> None:
        r = mem.record_turn(
            thread=thread,
            user=user,
            input=f"{name}: {text or 'question'}",
            output=f"answer {name}",
            worklog=[{"tool": "grep", "args": {"pattern": name}, "result": f"found {name}"}],
            parents=[ids[p] for p in parents.split()],
        )
        ids[name] = r.id

    rec("old1", "t1", "ana")
    rec("old2", "t1", "ana", "old1")
    rec("k8s", "t9", "zed", text="kubernetes rollout stuck")
    rec("other", "t2", "ana", text="billing question")
    rec("mid", "t1", "ana", "old2 k8s")
    rec("last", "t1", "ana", "mid")
    yield mem, ids
    mem.close()


def test_pack_has_each_source_with_reasons(world: tuple[Memory, dict[str, str]]) -> None:
    mem, ids = world
    pack = mem.context(thread="t1", user="ana", keywords=["kubernetes"], budget=4000)
    kinds = [i.kind for i in pack.items]
    assert kinds[0] == "snapshot" and "We deploy with make deploy." in pack.items[0].text
    routers = [i.ref for i in pack.items if i.kind == "router"]
    assert routers[:2] == ["index.md", "wiki/ops/index.md"]  # top first
    by_ref = {i.ref: i for i in pack.items}
    assert by_ref[ids["last"]].reason == "latest turn of thread t1"
    assert by_ref[ids["other"]].reason == "recent turn of user ana in thread t2"
    assert by_ref[ids["k8s"]].reason == "matches keywords kubernetes"
    # k8s is also an ancestor of the thread's latest turn: listed once, both reasons kept.
    assert any(r.startswith(f"ancestor of {ids['last']}") for r in by_ref[ids["k8s"]].also)
    assert len({i.path for i in pack.items}) == len(pack.items)
    assert all(i.reason for i in pack.items)
    for item in pack.items:
        assert f"_why: {item.reason}_" in item.text
    assert pack.tokens == tokens.counter().count(pack.text) <= 4000
    assert pack.to_dict()["items"][0]["kind"] == "snapshot"


def test_old_ancestors_show_input_and_output_only(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s", git=False)
    overrides = {**NO_GIT, "turns": {"context_thread_turns": 1, "context_ancestors_compact": 1}}
    with Memory.open(root, overrides=overrides) as mem:
        prev: list[str] = []
        for i in range(4):
            r = mem.record_turn(
                thread="a" if i < 3 else "b", input=f"q{i}", output=f"r{i}",
                worklog=[{"tool": "t", "result": f"w{i}"}], parents=prev,
            )  # fmt: skip
            prev = [r.id]
        pack = mem.context(thread="b", budget=3000)
        turns = [i for i in pack.items if i.kind == "turn"]
        assert [i.text.count("**Work:**") for i in turns] == [1, 1, 0, 0]
        assert "q0" in turns[-1].text and "r0" in turns[-1].text


def test_budget_below_snapshot_is_a_clear_error(world: tuple[Memory, dict[str, str]]) -> None:
    mem, _ = world
    with pytest.raises(InvalidInput, match="below what the snapshot alone needs"):
        mem.context(thread="t1", budget=20)
    with pytest.raises(InvalidInput, match="positive"):
        mem.context(thread="t1", budget=0)
    with pytest.raises(InvalidInput, match="path separators"):
        mem.context(thread="../x")


def test_pack_is_deterministic(world: tuple[Memory, dict[str, str]]) -> None:
    mem, _ = world
    a = mem.context(thread="t1", user="ana", keywords="kubernetes, billing", budget=900)
    b = mem.context(thread="t1", user="ana", keywords="kubernetes, billing", budget=900)
    with Memory.open(mem.root, overrides=NO_GIT) as other:
        c = other.context(thread="t1", user="ana", keywords="kubernetes, billing", budget=900)
    assert a.text == b.text == c.text
    assert a.to_dict() == c.to_dict()


def test_bytes_fallback_keeps_the_budget(world: tuple[Memory, dict[str, str]]) -> None:
    mem, _ = world
    with Memory.open(mem.root, overrides={**NO_GIT, "turns": {"token_counter": "bytes"}}) as m:
        pack = m.context(thread="t1", user="ana", budget=700)
        assert pack.counter == "utf8-bytes"
        assert len(pack.text.encode()) <= 700
        assert pack.omitted  # the rest did not fit, and says so


WORDS = ["deploy", "kubernetes", "billing", "refund", "login", "cache", "## Output", "é"]


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(0, 10),
    budget=st.integers(1, 1500),
    thread=st.sampled_from(["t0", "t1", "t2"]),
    user=st.sampled_from(["", "u0", "u1"]),
    kws=st.lists(st.sampled_from(WORDS), max_size=3),
    snapshot=st.booleans(),
)
def test_budget_is_never_exceeded(
    *, seed: int, n: int, budget: int, thread: str, user: str, kws: list[str], snapshot: bool
) -> None:
    rnd = random.Random(seed)
    tmp = Path(tempfile.mkdtemp())
    try:
        root = Store.init(tmp / "s", git=False)
        if snapshot:
            (root / "SNAPSHOT.md").write_text(" ".join(rnd.choices(WORDS, k=rnd.randint(1, 40))))
        with Memory.open(root, overrides=NO_GIT) as mem:
            ids: list[str] = []
            for _ in range(n):
                text = " ".join(rnd.choices(WORDS, k=rnd.randint(1, 300)))
                parents = rnd.sample(ids, k=min(len(ids), rnd.randint(0, 2)))
                rec = mem.record_turn(
                    thread=rnd.choice(["t0", "t1", "t2"]), user=rnd.choice(["u0", "u1", ""]),
                    input=text, output=text[::-1], parents=parents,
                    worklog=[{"tool": rnd.choice(WORDS), "result": text[:50]}],
                )  # fmt: skip
                ids.append(rec.id)
            try:
                pack = mem.context(thread=thread, user=user, keywords=kws, budget=budget)
            except InvalidInput as exc:
                # Only allowed when even the snapshot (or the header) cannot fit.
                assert "snapshot" in str(exc) or "header" in str(exc)
                return
            counter = tokens.counter()
            assert counter.count(pack.text) == pack.tokens <= budget
            assert len({i.path for i in pack.items}) == len(pack.items)
            for item in pack.items:  # a turn's heading and body, counted apart, add up
                assert item.tokens == counter.count(item.text)
            if snapshot:
                assert pack.items and pack.items[0].kind == "snapshot"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_cli_context(world: tuple[Memory, dict[str, str]]) -> None:
    import json

    mem, ids = world
    out = run_cli(
        "--root", str(mem.root), "context", "--thread", "t1", "--user", "ana",
        "--keywords", "kubernetes", "--budget", "800", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    pack = json.loads(out.stdout)
    assert pack["budget"] == 800 and pack["tokens"] <= 800
    assert pack["items"][0]["kind"] == "snapshot"
    assert all(item["reason"] for item in pack["items"])
    text = run_cli("--root", str(mem.root), "context", "--thread", "t1", "--budget", "800")
    assert text.stdout.decode().startswith("# memdir context")
    small = run_cli("--root", str(mem.root), "context", "--thread", "t1", "--budget", "10")
    assert small.returncode == 2
    assert "below what the snapshot alone needs" in small.stderr.decode()


def test_keyword_turns_rank_rare_and_many_matches_first(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s", git=False)
    overrides = {**NO_GIT, "turns": {"context_keyword_turns": 2, "context_thread_turns": 0}}
    with Memory.open(root, overrides=overrides) as mem:
        both = mem.record_turn(thread="a", input="deploy failed on the walrus cluster")
        for i in range(4):
            mem.record_turn(thread="b", input=f"deploy number {i}")
        rare = mem.record_turn(thread="c", input="walrus sighting")
        newest = mem.record_turn(thread="d", input="deploy again")
        pack = mem.context(thread="zzz", keywords=["deploy", "walrus"], budget=3000)
        got = [i.ref for i in pack.items if i.kind == "turn"]
        # two keywords beat one; the rare keyword beats the common one; then newest first
        assert got == [both.id, rare.id]
        assert newest.id not in got


def test_a_turn_without_tools_shows_no_work_note(tmp_path: Path) -> None:
    root = Store.init(tmp_path / "s", git=False)
    with Memory.open(root, overrides=NO_GIT) as mem:
        plain = mem.record_turn(thread="a", input="deploy?", output="rolled back at noon")
        tools = mem.record_turn(
            thread="a",
            input="check the pager",
            output="it paged twice",
            worklog=[{"tool": "pager", "result": "two pages"}],
            parents=[plain.id],
        )
        assert "No tool calls" in plain.compact  # the record keeps the note
        pack = mem.context(thread="a", budget=3000)
        text = {i.path: i.text for i in pack.items if i.kind == "turn"}
        assert "**Work:**" not in text[plain.path] and "No tool calls" not in text[plain.path]
        assert text[plain.path].count("rolled back at noon") == 1
        assert "**Work:**" in text[tools.path] and "pager" in text[tools.path]
