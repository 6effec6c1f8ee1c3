"""Frontmatter keys stay the text they were written as: YAML 1.1 types values, never keys."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memdir.doc import frontmatter
from memdir.files.store import Store
from memdir.service import Memory

NO_GIT = {"store": {"git_commit": False}}
# key text -> value: each key reads, as YAML 1.1 would type it, as another key or a non-string
TYPED_KEYS = {
    "y": 1,
    "on": 2,
    "1": "a",
    "null": "b",
    "2024-01-01": "c",
    "~": "d",
    ".5": "e",
    "0x1f": "f",
    "yes": True,
    "n": 3.5,
    "false": 0,
    "-.inf": "g",
}
BLOCK = "".join(
    f"{key}: {'yes' if value is True else value}\n" for key, value in TYPED_KEYS.items()
)
DOC = f"---\n{BLOCK}title: Keys\n---\n# Keys\n\nThe kettle is descaled.\n"


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[Memory]:
    with Memory.open(Store.init(tmp_path / "s", git=False), overrides=NO_GIT) as opened:
        yield opened


def test_keys_are_never_typed_and_values_are() -> None:
    fm = frontmatter.parse(DOC).fm
    assert fm == {**TYPED_KEYS, "title": "Keys"}
    assert all(type(key) is str for key in fm)
    # in a nested mapping and a list of mappings too, on both readers' paths
    nested = "---\nmeta: {on: 1, 2: x}\nlist:\n  - y: 1\n    null: 2\n---\n"
    assert frontmatter.parse(nested).fm == {
        "meta": {"on": 1, "2": "x"},
        "list": [{"y": 1, "null": 2}],
    }
    # a merge key still merges
    assert frontmatter.parse("---\n<<: {a: 1}\nb: 2\n---\n").fm == {"a": 1, "b": 2}


def test_where_finds_keys_yaml_would_have_typed(mem: Memory) -> None:
    mem.write("notes/keys.md", DOC)
    mem.write("notes/other.md", "---\ntrue: 1\n---\n# Other\n\nThe kettle is descaled.\n")
    for where, expected in (
        ("y=1", {"notes/keys.md"}),
        ("on=2", {"notes/keys.md"}),
        ("null=b", {"notes/keys.md"}),
        ("2024-01-01=c", {"notes/keys.md"}),
        ("true=1", {"notes/other.md"}),
    ):
        hits = mem.search("kettle", mode="bm25", where=[where])
        assert {h.path for h in hits} == expected, where


@pytest.mark.parametrize("key", ["a\\b", "C:\\tmp", "a.b", "a[0]", "$", "*", "é", "a b", "a'b"])
def test_where_finds_keys_of_any_characters(mem: Memory, key: str) -> None:
    quoted = "'" + key.replace("'", "''") + "'"
    mem.write("notes/odd.md", f"---\n{quoted}: v\n---\n# Odd\n\nThe kettle is descaled.\n")
    mem.write("notes/other.md", "---\nab: v\n---\n# Other\n\nThe kettle is descaled.\n")
    assert frontmatter.parse(mem.read("notes/odd.md").content).fm == {key: "v"}
    for where in ([f"{key}=v"], {key: "v"}):
        hits = mem.search("kettle", mode="bm25", where=where)
        assert [h.path for h in hits] == ["notes/odd.md"], where


def test_merge_forget_and_provenance_keep_the_key_text(mem: Memory) -> None:
    mem.write("notes/keys.md", DOC, provenance="run:1")
    mem.merge("notes/keys.md", episode="e1")
    mem.forget("notes/keys.md", reason="replaced")
    text = mem.read("notes/keys.md").content
    assert text.startswith("---\n" + BLOCK), text
    fm = frontmatter.parse(text).fm
    assert {k: fm[k] for k in TYPED_KEYS} == TYPED_KEYS
    assert fm["memory_status"] == "superseded"
    assert [e["id"] for e in fm["derived-from"]] == ["1"]
    assert [e["id"] for e in fm["merged-from"]] == ["e1"]


def _set_status(fm: Any) -> None:
    fm["memory_status"] = "superseded"


# Plain scalars that YAML 1.1 would type, and any other text a plain key can be.
TYPED_TEXT = (
    "y", "Y", "n", "on", "Off", "yes", "NO", "true", "null", "~", "1", "-2", "+3", "0x1f",
     "0o7", "0b101", "08", "1_000", ".5", "1e3", "6.02e23", ".inf", "-.Inf", ".nan",
     "2024-01-01", "2024-01-01T10:00:00Z", "1:30", "="
)  # fmt: skip
_PLAIN_TEXT = st.text(
    st.characters(
        codec="utf-8", categories=["L", "N", "P", "S", "Zs"], exclude_characters="\u2028\u2029\x85"
    ),
    min_size=1,
    max_size=40,
)


def _plain_key_reads_as_one_key(key: str) -> bool:
    try:
        data = yaml.safe_load(f"{key}: 1\n")
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and len(data) == 1 and list(data.values()) == [1]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.one_of(st.sampled_from(TYPED_TEXT), _PLAIN_TEXT))
def test_a_plain_key_survives_a_round_trip(key: str) -> None:
    assume(key == key.strip() and _plain_key_reads_as_one_key(key))
    assume(not key.startswith(("<<", "---")))
    assume(not key.startswith(('"', "'")))  # quoted, not plain: `""` is the empty key
    # An anchor names the key's node and is no part of its text: `&0: 1` has the empty key.
    assume(not key.startswith("&"))
    doc = f"---\n{key}: 1\nother: x\n---\nbody\n"
    parsed = frontmatter.parse(doc)
    if parsed.error is not None:  # memdir refuses what PyYAML reads (an alias, a tag)
        return
    assert parsed.fm == {key: 1, "other": "x"}
    edited = frontmatter.edit(doc, _set_status)
    if key in TYPED_TEXT:  # what YAML 1.1 types is written back byte for byte
        assert edited.startswith(f"---\n{key}: 1\n"), edited
    assert frontmatter.parse(edited).fm == {key: 1, "other": "x", "memory_status": "superseded"}


@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(
        st.one_of(st.sampled_from(TYPED_TEXT), st.text(max_size=30)), min_size=1, max_size=5
    )
)
def test_any_key_text_survives_render_and_edit(keys: list[str]) -> None:
    assume(all(frontmatter.json_value(k) == k for k in keys))
    fm = {key: i for i, key in enumerate(keys)}
    assume("\x00" not in "".join(fm) and all(not 0xD800 <= ord(c) <= 0xDFFF for c in "".join(fm)))
    doc = frontmatter.render(fm, "body\n")
    assert frontmatter.parse(doc).fm == fm
    edited = frontmatter.edit(doc, _set_status)
    assert frontmatter.parse(edited).fm == {**fm, "memory_status": "superseded"}


def test_an_anchor_on_a_key_is_no_part_of_it() -> None:
    """`&name` names a key's node; the key is its text without it (the empty key when there is
    none), as for an anchored value."""
    assert frontmatter.parse("---\n&a k: 1\n---\nb\n").fm == {"k": 1}
    assert frontmatter.parse("---\n&0: 1\nother: x\n---\nb\n").fm == {"": 1, "other": "x"}
