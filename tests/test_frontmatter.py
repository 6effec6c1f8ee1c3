"""Frontmatter: KiwiFS YAML 1.1 typing on read, type-preserving writes, round-trip edits."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memdir.doc import frontmatter
from memdir.errors import InvalidDocument

DOC = """---
title: Hello
date: 2026-01-01
ts: 2026-01-01T10:00:00Z
spaced: 2026-01-01 10:00:00
flag: yes
off_flag: off
short_yes: y
count: 42
ratio: 1.5
exp: 1e3
hex: 0x1f
octal: 012
under: 1_000
clock: 1:30
nothing: ~
empty:
quoted_num: '42'
quoted_bool: "yes"
list:
  - {type: run, id: a}
---
# Body

text
"""


def test_parse_types_like_kiwifs() -> None:
    p = frontmatter.parse(DOC)
    assert p.has_block and p.error is None
    fm = p.fm
    assert fm["title"] == "Hello"
    assert fm["date"] == "2026-01-01"
    assert fm["ts"] == "2026-01-01T10:00:00Z"
    assert fm["spaced"] == "2026-01-01 10:00:00"
    assert fm["flag"] is True and fm["off_flag"] is False and fm["short_yes"] is True
    assert fm["count"] == 42 and type(fm["count"]) is int
    assert fm["ratio"] == 1.5 and fm["exp"] == 1000.0 and type(fm["exp"]) is float
    assert fm["hex"] == 31 and fm["octal"] == 10 and fm["under"] == 1000
    assert fm["clock"] == "1:30"
    assert fm["nothing"] is None and fm["empty"] is None
    assert fm["quoted_num"] == "42" and fm["quoted_bool"] == "yes"
    assert fm["list"] == [{"type": "run", "id": "a"}]
    assert p.body == "# Body\n\ntext\n"
    assert p.raw.startswith("title: Hello\n") and p.raw.endswith("id: a}\n")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("08", 8.0),
        (".5", 0.5),
        ("-.inf", -math.inf),
        ("+12", 12),
        ("-0b101", -5),
        ("0o17", 15),
        ("1e400", "1e400"),
        ("1.", 1.0),
        ("-x", "-x"),
        ("=", "="),
        ("True", True),
        ("NO", False),
        ("nope", "nope"),
        ("18446744073709551615", 18446744073709551615),
        ("18446744073709551616", 1.8446744073709552e19),
    ],
)
def test_scalar_edge_cases(value: str, expected: Any) -> None:
    got = frontmatter.parse(f"---\nv: {value}\n---\n").fm["v"]
    assert got == expected and type(got) is type(expected)


def test_crlf_and_trailing_spaces() -> None:
    p = frontmatter.parse("---  \r\na: 1\r\nb: x\r\n--- \r\nbody\r\nmore\r\n")
    assert p.has_block and p.fm == {"a": 1, "b": "x"}
    assert p.body == "body\r\nmore\r\n"


@pytest.mark.parametrize(
    "text",
    [
        "no frontmatter\n",
        "\n---\na: 1\n---\n",  # blank line before the fence
        "---\na: 1\n",  # never closed
        "---x\na: 1\n---\n",
        "----\na: 1\n---\n",
        "",
        "---",
    ],
)
def test_no_block(text: str) -> None:
    p = frontmatter.parse(text)
    assert not p.has_block and p.fm == {} and p.body == text and p.error is None


def test_closing_fence_at_end_of_file() -> None:
    p = frontmatter.parse("---\na: 1\n---")
    assert p.has_block and p.fm == {"a": 1} and p.body == ""


def test_dots_do_not_close() -> None:
    p = frontmatter.parse("---\na: 1\n...\n---\nbody")
    # "..." is a YAML document end marker, not a fence; the block runs to the next ---.
    assert p.has_block and p.body == "body"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("---\na: [\n---\nbody\n", "line 3"),
        ("---\n- a\n- b\n---\n", "not a mapping"),
        ("---\njust a string\n---\n", "not a mapping"),
        ("---\na: !!python/object:os.system x\n---\n", "invalid YAML"),
        ("---\n? [a, b]\n: 1\n---\n", "invalid YAML"),
        ("---\na: b: c\n---\n", "line 2"),
        ("---\na: &a [*a]\n---\n", "YAML aliases are not supported in frontmatter"),
        ("---\na: &x 1\nb: [*x]\n---\n", "*x at line 3, column 5"),
    ],
)
def test_invalid_yaml_is_empty_and_strict_raises(text: str, needle: str) -> None:
    p = frontmatter.parse(text)
    assert p.has_block and p.fm == {} and p.error is not None and needle in p.error
    with pytest.raises(InvalidDocument) as info:
        frontmatter.load_strict(text)
    assert needle in str(info.value)


def test_empty_block_and_strict_ok() -> None:
    assert frontmatter.parse("---\n---\nbody").fm == {}
    assert frontmatter.parse("---\n---\nbody").error is None
    assert frontmatter.load_strict(DOC)["count"] == 42
    assert frontmatter.load_strict("plain body") == {}


def test_render_quotes_values_that_would_change_type() -> None:
    fm = {
        "id": "42",
        "flag": "yes",
        "short": "n",
        "date": "2026-01-01",
        "nul": "null",
        "ratio": "1.5",
        "empty": "",
        "tilde": "~",
        "clock": "1:30",
        "real": 1.5,
        "num": 42,
        "yes_bool": True,
        "none": None,
        "text": "héllo ✓ — ok",
    }
    doc = frontmatter.render(fm, "body\n")
    assert "id: '42'" in doc and "flag: 'yes'" in doc and "short: 'n'" in doc
    assert "date: '2026-01-01'" in doc and "real: 1.5\n" in doc and "num: 42\n" in doc
    assert "yes_bool: true" in doc and "none: null" in doc
    assert "héllo ✓ — ok" in doc  # unicode kept, not escaped
    back = frontmatter.parse(doc)
    assert back.fm == fm and list(back.fm) == list(fm) and back.body == "body\n"


def test_render_lists_of_dicts_in_block_style() -> None:
    fm = {
        "title": "T",
        "derived-from": [{"type": "run", "id": "r1", "date": "2026-01-02T03:04:05Z"}],
        "merged-from": [{"type": "episode", "id": "e1"}, {"type": "run", "path": "a/b.md"}],
    }
    doc = frontmatter.render(fm, "")
    assert "derived-from:\n  - type: run\n    id: r1\n" in doc
    assert "merged-from:\n  - type: episode\n    id: e1\n  - type: run\n    path: a/b.md\n" in doc
    assert frontmatter.parse(doc).fm == fm


def test_render_and_edit_write_a_shared_value_in_full() -> None:
    shared = ["a", {"k": "v"}]
    fm = {"one": shared, "two": shared}
    doc = frontmatter.render(fm, "body\n")
    assert "&" not in doc and "*" not in doc
    assert frontmatter.parse(doc).fm == fm
    out = frontmatter.edit("---\ntitle: x\n---\nbody\n", lambda d: d.update(fm))
    assert "&" not in out and "*" not in out
    assert frontmatter.parse(out).fm == {"title": "x", **fm}


def test_render_empty_fm() -> None:
    assert frontmatter.render({}, "just body\n") == "just body\n"
    tricky = "---\na: 1\n---\nx"
    doc = frontmatter.render({}, tricky)
    p = frontmatter.parse(doc)
    assert p.fm == {} and p.body == tricky


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.sampled_from(
        [
            "42",
            "yes",
            "no",
            "y",
            "n",
            "on",
            "null",
            "~",
            "",
            "1.5",
            "1e3",
            "0x1f",
            "012",
            "2026-01-01",
            "2026-01-01T10:00:00Z",
            "1:30",
            "=",
            "<<",
            "- a",
            "#x",
            "a: b",
            " lead",
            "trail ",
            "multi\nline\n",
            "\ttab",
            "'q'",
            '"dq"',
            "✓ ünï",
        ]
    )
)
_keys = st.text(min_size=1, max_size=12) | st.sampled_from(["yes", "n", "42", "null", "<<"])
_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=12,
)
_fms = st.dictionaries(_keys, _values, max_size=6)


@settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(fm=_fms, body=st.text(max_size=60))
def test_render_round_trip(fm: dict[str, Any], body: str) -> None:
    doc = frontmatter.render(fm, body)
    p = frontmatter.parse(doc)
    assert p.error is None
    assert p.fm == fm
    assert p.body == body


EDIT_DOC = """---
# a comment line
title: 'Quoted'   # trailing comment
flag: yes
date: 2026-01-01
count: 42
weird_key: {a: 1, b: [x, y]}
derived-from:
    - type: run
      id: r1
---
Body with --- dashes
and *markdown*
"""


def test_edit_noop_is_byte_identical() -> None:
    assert frontmatter.edit(EDIT_DOC, lambda d: None) == EDIT_DOC
    crlf = EDIT_DOC.replace("\n", "\r\n")
    assert frontmatter.edit(crlf, lambda d: None) == crlf

    def same(d: Any) -> None:
        d["count"] = 42

    assert frontmatter.edit(EDIT_DOC, same) == EDIT_DOC


def test_edit_preserves_everything_else() -> None:
    def mutate(d: Any) -> None:
        d["derived-from"].append({"type": "session", "id": "7", "actor": "yes"})
        d["memory_status"] = "no"

    out = frontmatter.edit(EDIT_DOC, mutate)
    assert out.endswith("---\nBody with --- dashes\nand *markdown*\n")
    assert "# a comment line\n" in out
    assert "title: 'Quoted'   # trailing comment\n" in out
    assert "flag: yes\n" in out and "date: 2026-01-01\n" in out
    assert "weird_key: {a: 1, b: [x, y]}\n" in out
    assert out.index("title") < out.index("flag") < out.index("memory_status")
    fm = frontmatter.parse(out).fm
    assert fm["flag"] is True and fm["date"] == "2026-01-01"
    assert fm["derived-from"] == [
        {"type": "run", "id": "r1"},
        {"type": "session", "id": "7", "actor": "yes"},
    ]
    assert fm["memory_status"] == "no"
    # the original 4-space sequence indentation is kept
    assert "derived-from:\n    - type: run\n      id: r1\n    - type: session\n" in out


def test_edit_crlf_keeps_crlf() -> None:
    crlf = EDIT_DOC.replace("\n", "\r\n")
    out = frontmatter.edit(crlf, lambda d: d.__setitem__("x", "1"))
    assert "\n" not in out.replace("\r\n", "")
    assert frontmatter.parse(out).fm["x"] == "1"


def test_edit_adds_block_to_plain_document() -> None:
    out = frontmatter.edit("# Title\n\nbody\n", lambda d: d.update(id="42", kind="yes"))
    p = frontmatter.parse(out)
    assert p.fm == {"id": "42", "kind": "yes"} and p.body == "# Title\n\nbody\n"
    assert frontmatter.edit("# T\n", lambda d: None) == "# T\n"


def test_edit_delete_keys_and_invalid() -> None:
    out = frontmatter.edit("---\na: 1\n---\nb\n", lambda d: d.pop("a"))
    p = frontmatter.parse(out)
    assert p.has_block and p.fm == {} and p.body == "b\n"
    with pytest.raises(InvalidDocument):
        frontmatter.edit("---\na: [\n---\n", lambda d: None)
    with pytest.raises(InvalidDocument):
        frontmatter.edit("---\n- a\n---\n", lambda d: None)


@settings(max_examples=80, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(additions=_fms, body=st.text(max_size=40))
def test_edit_then_parse_gives_back_what_mutate_put(additions: dict[str, Any], body: str) -> None:
    base = "---\ntitle: x  # keep\nflag: yes\n---\n" + body

    def mutate(d: Any) -> None:
        for k, v in additions.items():
            d[k] = v

    out = frontmatter.edit(base, mutate)
    p = frontmatter.parse(out)
    assert p.error is None
    expected: dict[str, Any] = {"title": "x", "flag": True}
    expected.update(additions)
    assert p.fm == expected
    assert p.body == body


def test_parse_speed() -> None:
    doc = (
        "---\ntitle: An episode\nepisode_id: ep-123\nmemory_kind: episodic\n"
        "created: 2026-01-01T10:00:00Z\ntags: [a, b, c]\nmerged-from:\n"
        "  - {type: run, id: r1}\n---\n" + "Some body text. " * 100
    )
    n = 2000
    start = time.process_time()
    for _ in range(n):
        frontmatter.parse(doc)
    rate = n / (time.process_time() - start)
    assert rate > 1500, rate  # floor for a loaded CI machine; PyYAML's C parser dominates
