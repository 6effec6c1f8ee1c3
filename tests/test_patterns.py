"""grep's regular expressions: what cannot be bounded is refused, through the API, the CLI
and HTTP, and the worker that refused one stays healthy."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from helpers import run_cli
from http_server import live_server
from memdir.doc import patterns
from memdir.documents import grep as service
from memdir.errors import InvalidQuery
from memdir.service import Memory

# Each of these took hundreds of megabytes in one grep before it was refused (measured with
# ru_maxrss: (?R) 544 MB then MemoryError, a{1000000} 261 MB, the nested counts 276 MB).
HOSTILE = {
    "(?R)": "calls a group or itself",
    "(?R)?x": "calls a group or itself",
    "(?0)": "calls a group or itself",
    "(a(?1)?b)": "calls a group or itself",
    "(?P<n>a(?&n)?b)": "calls a group or itself",
    "(?P<n>a(?P>n)?b)": "calls a group or itself",
    "a{1000000}": "a count of 1000000",
    "a{1000000,}": "a count of 1000000",
    "x{4294967294}": "a count of 4294967294",
    "((a{100}){100}){100}": "multiply out to 1000000",
    "(?:(?:a{30}){30}){30}": "multiply out to 27000",
    "|".join(f"w{i}" for i in range(20000)): "longer than 2000 characters",
    "(blue){e<=3}": "fuzzy matching",
    "(?x) a { 1000000 }": "verbose flag",
}

ORDINARY = [
    (r"blue switch", 1),
    (r"\bswitch\b", 1),
    (r"(?P<w>l)(?P=w)", 1),  # a backreference matches text: kept
    (r"(?<=blue )switch", 1),
    (r"(?i)BLUE", 1),
    (r"\p{Lu}\w+ back", 1),
    (r"[(?R)]oll", 1),  # inside a class, (?R) is four characters
    (r"\(\?R\)", 0),
    (r"ba{0,1000000}ck", 1),  # an upper bound is a loop, not copies
    (r"(?:ab){1,100000}", 0),
    (r"(.)\1{2}", 0),
]


@pytest.fixture
def notes(store_root: Path) -> Memory:
    with Memory.open(store_root, overrides={"store": {"git_commit": False}}) as mem:
        mem.write("notes/a.md", "# Deploys\n\nRoll back with the blue switch.\n")
        yield mem


@pytest.mark.parametrize("pattern", list(HOSTILE))
def test_a_pattern_whose_memory_has_no_bound_is_refused(notes: Memory, pattern: str) -> None:
    started = time.monotonic()
    with pytest.raises(InvalidQuery, match="grep refuses this regular expression") as caught:
        notes.grep(pattern)
    assert HOSTILE[pattern] in caught.value.message
    assert caught.value.code == "invalid_query"
    assert time.monotonic() - started < 0.5  # refused before it is compiled


@pytest.mark.parametrize(("pattern", "count"), ORDINARY)
def test_ordinary_patterns_still_run(notes: Memory, pattern: str, count: int) -> None:
    patterns.check(pattern)
    hits = notes.grep(pattern, path_prefix="notes/")
    assert len(hits) == count, (pattern, hits)
    assert all(h.path == "notes/a.md" for h in hits)


def test_a_long_line_is_searched_in_windows_and_finds_what_the_whole_line_holds(
    notes: Memory,
) -> None:
    width = service.GREP_WINDOW
    line = "a" * (3 * width) + " needle " + "b" * (width - 100) + " ends"
    notes.write("notes/long.md", f"# Long\n\n{line}\n")
    found = notes.grep("needle", path_prefix="notes/long")
    assert [(h.line, "needle" in h.text) for h in found] == [(3, True)]
    # A match that crosses a window's end is seen by the next, overlapping window.
    crossing = "c" * (width - 3) + "XYZWV" + "c" * 10
    notes.write("notes/cross.md", f"# C\n\n{crossing}\n")
    assert [h.line for h in notes.grep("XYZWV", path_prefix="notes/cross")] == [3]
    # "$" matches only the line's real end, not where a window is cut.
    assert notes.grep("a$", path_prefix="notes/long") == []
    assert [h.line for h in notes.grep("ends$", path_prefix="notes/long")] == [3]


def test_a_long_line_does_not_make_the_stack_grow_with_it(
    notes: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over one line of 4 million characters "(a)+c" grew the peak RSS by 377 MB; window by
    window the engine is never given more than GREP_WINDOW characters."""
    import regex

    seen: list[int] = []
    real = regex.compile

    class Spy:
        def __init__(self, compiled: regex.Pattern[str]) -> None:
            self.compiled = compiled

        def search(self, text: str, pos: int, endpos: int, timeout: float) -> object:
            seen.append(endpos - pos)
            return self.compiled.search(text, pos, endpos, timeout=timeout)

    monkeypatch.setattr(regex, "compile", lambda *a: Spy(real(*a)))
    notes.write("notes/big.md", "# Big\n\n" + "a" * 1_000_000 + "c\n")
    hits = notes.grep("(a|b)+c", path_prefix="notes/big")
    assert [h.line for h in hits] == [3]
    assert max(seen) == service.GREP_WINDOW and len(seen) > 15


def test_a_refused_or_stopped_grep_leaves_the_thread_able_to_write(
    store_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grep stopped halfway used to keep its cursor (and its read snapshot) while the
    error lived; the thread's next write then failed with "database is locked"."""
    monkeypatch.setattr(service, "GREP_SECONDS", 0.2)
    with Memory.open(store_root) as mem, Memory.open(store_root) as other:
        for i in range(3):
            mem.write(f"notes/r{i}.md", "# R\n\n" + "a" * 30 + "!\n")
        with pytest.raises(InvalidQuery, match="took longer") as caught:
            mem.grep("(a|aa)+b")
        other.write("notes/other.md", "# O\n\nwritten meanwhile\n")
        mem.write("notes/after.md", "# After\n\nstill writes\n")
        assert caught.value.code == "invalid_query"
        assert [h.path for h in mem.grep("still writes")] == ["notes/after.md"]


def test_cli_refuses_in_one_line_without_a_traceback(notes: Memory) -> None:
    for pattern in ("(?R)", "a{1000000}"):
        result = run_cli("grep", pattern, cwd=notes.root)
        assert result.returncode == 2, result.stderr
        err = result.stderr.decode()
        assert "Traceback" not in err and "MemoryError" not in err
        assert len(err.strip().splitlines()) == 1 and "grep refuses" in err, err
    assert b"blue switch" in run_cli("grep", "blue", cwd=notes.root).stdout


def test_http_answers_400_and_the_same_server_goes_on(notes: Memory) -> None:
    with (
        live_server(notes.root, {"embeddings": {"enabled": False}}) as live,
        live.client() as client,
    ):
        # Four at once took 2.1 GB before; now each is refused before it is compiled.
        with ThreadPoolExecutor(4) as pool:
            codes = list(
                pool.map(
                    lambda p: client.get("/v1/grep", params={"pattern": p}).status_code,
                    ["(?R)", "(?0)", "a{1000000}", "(?R)?x"],
                )
            )
        assert codes == [400, 400, 400, 400]
        for pattern in ("(?R)", "(?R)?x", "((a{100}){100}){100}"):
            refused = client.get("/v1/grep", params={"pattern": pattern})
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["code"] == "invalid_query" and "refuses" in error["message"]
            put = client.put("/v1/files/notes/next.md", json={"content": "# N\n\nnext\n"})
            assert put.status_code in (200, 201), put.text
            found = client.get("/v1/grep", params={"pattern": "next|blue"})
            assert found.status_code == 200
            assert {h["path"] for h in found.json()} == {"notes/a.md", "notes/next.md"}
