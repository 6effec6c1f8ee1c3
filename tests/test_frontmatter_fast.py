"""The frontmatter fast path reads exactly what PyYAML reads, or declines."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memdir.doc import frontmatter
from memdir.doc.fastyaml import fast_load
from memdir.doc.frontmatter import _load_yaml


def same(a: Any, b: Any) -> bool:
    """Equal with types (True is not 1, 1 is not 1.0) and NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


KEYS = ["id", "episode_id", "merged-from", "type", "a.b", "_x", "yes", "on", "null", "y", "e1"]
KEYS += ["True", "k" * 130, "x-y", "N"]
SCALARS = [
    "42",
    "042",
    "08",
    "0x1f",
    "0o17",
    "0b101",
    "1_000",
    "+7",
    "-7",
    "-0",
    "1.5",
    ".5",
    "-.5",
    "1e3",
    "1E-3",
    "-1e400",
    "1e400",
    ".inf",
    "-.Inf",
    ".nan",
    "yes",
    "No",
    "on",
    "OFF",
    "y",
    "true",
    "~",
    "null",
    "2026-01-01",
    "2026-01-01T10:00:00Z",
    "1:30",
    "-1:30",
    "run:1",
    "a: b",
    "a #b",
    "a#b",
    "a:",
    "http://x.y/z?q=1",
    "<<",
    "=",
    "-",
    "- x",
    "-x",
    "?x",
    ":x",
    "[a, b]",
    "{a: 1}",
    "&a x",
    "*a",
    "!!str 7",
    "!!int '7'",
    "|",
    ">",
    "'q'",
    "'it''s'",
    '"dq"',
    '"a\\"b"',
    '"a \\n b"',
    '"unterminated',
    "'x' y",
    "%x",
    "@x",
    "`x",
    "# c",
    "x # c",
    "ünï ©",
    "a  b",
    "...",
    "---x",
    "0.",
    "+.5",
    "1_0.5",
    "0777",
    "9" * 25,
    "-9" * 2,
]
FREE = st.text(
    alphabet=st.sampled_from(list("ab1 :#-'\"[]{}!&*|>%@`.\\\t\r\x85\u2028é")), max_size=8
)
SIMPLE = ["run", "ep-000001", "Page 1", "2026-01-01", "7", "a b c", "x.md", "Ünï", "'s'", '"d"']
GOOD_KEYS = ["id", "type", "title", "date", "actor", "path", "memory_kind", "x"]
simple = st.sampled_from(SIMPLE)
scalar = st.one_of(st.sampled_from(SCALARS), simple, simple, FREE)
key = st.one_of(st.sampled_from(KEYS), st.sampled_from(GOOD_KEYS), st.sampled_from(GOOD_KEYS), FREE)
pad = st.sampled_from(["", " ", "  ", "\t"])


@st.composite
def item_lines(draw: st.DrawFn, ind: int) -> list[str]:
    dash = " " * ind + "-" + draw(st.sampled_from([" ", "  ", ""]))
    col = len(dash)
    if draw(st.booleans()):
        return [dash + draw(scalar) + draw(pad)]
    lines = [dash + draw(key) + ":" + draw(st.sampled_from([" ", ""])) + draw(scalar)]
    for _ in range(draw(st.integers(0, 3))):
        indent = draw(st.sampled_from([col, col, col, col + 1, col - 1, 0]))
        lines.append(" " * max(indent, 0) + draw(key) + ": " + draw(scalar) + draw(pad))
    return lines


@st.composite
def blocks(draw: st.DrawFn) -> str:
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        shape = draw(st.integers(0, 12))
        if shape <= 3:
            lines.append(draw(key) + ":" + draw(st.sampled_from([" ", "  ", ""])) + draw(scalar))
        elif shape <= 6:
            lines.append(draw(key) + ":" + draw(pad))
            ind = draw(st.sampled_from([0, 2, 2, 4, 1]))
            for _ in range(draw(st.integers(0, 3))):
                lines.extend(draw(item_lines(ind)))
        elif shape <= 9:
            lines.append(draw(st.sampled_from(GOOD_KEYS)) + ": " + draw(simple))
        elif shape == 10:
            lines.append(draw(st.sampled_from(["", "   ", "# note", "  # note", "..."])))
        elif shape == 11:
            lines.append(draw(pad) + draw(FREE))
        else:  # a one-line flow list, sometimes of simple quoted strings
            parts = draw(st.lists(st.one_of(scalar, simple.map(lambda v: f'"{v}"')), max_size=3))
            sep = draw(st.sampled_from([", ", ",", " , "]))
            lines.append(draw(key) + ": [" + sep.join(parts) + "]" + draw(pad))
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=blocks())
def test_fast_path_agrees_with_pyyaml(raw: str) -> None:
    fast = fast_load(raw)
    if fast is None:
        return
    ref, error = _load_yaml(raw)
    assert error is None, (raw, fast, error)
    assert same(fast, ref), (raw, fast, ref)


COMMON = [
    "episode_id: ep-000001\nmemory_kind: episodic\ntype: run\ncreated: 2026-01-01T10:00:00Z\n",
    "title: Page 1\ntype: concept\nmerged-from:\n  - type: run\n    id: ep-000001\n"
    "  - type: run\n    id: '42'\n    date: '2026-01-02T00:00:00Z'\n",
    "derived-from:\n- type: run\n  id: r1\n  date: 2026-01-01\n  actor: anonymous\ncount: 3\n",
    "tags:\n  - a\n  - 'yes'\n  - 7\n# a comment\nflag: yes\nempty:\nratio: 0.25\n",
    'type: turn\nparents: ["01m8n9ndyp", "01m8n9ndxq"]\nkeywords: []\nthread: "t1"\n',
]


def test_common_shapes_take_the_fast_path_and_agree() -> None:
    for raw in COMMON:
        fast = fast_load(raw)
        assert fast is not None, raw
        ref, error = _load_yaml(raw)
        assert error is None
        assert same(fast, ref), (fast, ref)
    assert fast_load(COMMON[1])["merged-from"][1] == {
        "type": "run",
        "id": "42",
        "date": "2026-01-02T00:00:00Z",
    }


def test_rendered_frontmatter_reads_back_through_either_path() -> None:
    fm: dict[str, Any] = {
        "id": "42",
        "flag": "yes",
        "count": 7,
        "derived-from": [{"type": "run", "id": "1", "date": "2026-01-01T00:00:00Z"}],
    }
    doc = frontmatter.render(fm, "# Body\n")
    raw = doc.split("---\n")[1]
    assert fast_load(raw) == fm
    assert frontmatter.parse(doc).fm == fm


def test_declined_shapes_still_parse() -> None:
    for raw in ("a: [1, 2]\n", "a: |\n  text\n", "a:\n  b: 1\n", "a: x # c\n", "a: 'it''s'\n"):
        assert fast_load(raw) is None
        assert frontmatter.parse("---\n" + raw + "---\n").fm == _load_yaml(raw)[0]
