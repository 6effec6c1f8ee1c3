"""Links, sections and titles: extraction outside code, CommonMark-ish code rules."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import BREAD
from memdir.doc import frontmatter
from memdir.doc.links import Link, extract, section, sections, title_of
from memdir.service import Memory


def _targets(body: str) -> list[tuple[str, str]]:
    return [(link.kind, link.target) for link in extract(body)]


def test_wikilink_forms() -> None:
    body = "See [[alpha]], [[beta|Beta page]], [[gamma#Intro]], [[delta#Sec 2|shown]], [[#local]]."
    links = extract(body)
    assert [(lk.kind, lk.target, lk.label, lk.heading) for lk in links] == [
        ("wikilink", "alpha", None, None),
        ("wikilink", "beta", "Beta page", None),
        ("wikilink", "gamma", None, "Intro"),
        ("wikilink", "delta", "shown", "Sec 2"),
        ("wikilink", "", None, "local"),
    ]
    assert links[0].offset == body.index("[[alpha]]")
    assert extract("empty [[]] and [[ ]] are nothing") == []


def test_embeds_and_images() -> None:
    links = extract("![[diagram.png]] and ![alt text](img/a.png) and [doc](b.md)")
    assert links == [
        Link("embed", "diagram.png", None, None, offset=0),
        Link("markdown", "img/a.png", "alt text", None, False, True, offset=21),
        Link("markdown", "b.md", "doc", None, False, False, offset=48),
    ]


def test_markdown_link_details() -> None:
    body = (
        '[t1](notes/a.md "Title") [t2](<with space.md>) [t3](My%20Note.md#Some%20Part) '
        "[t4](https://example.org/x?q=1#frag) [t5](#only-anchor) [t6](mailto:a@b.c) "
        "[t7](//cdn/x.js) [t8](tel:123) [nested [x] label](n.md) [t9]( spaced.md  'q' )"
    )
    got = [(lk.target, lk.label, lk.heading, lk.external) for lk in extract(body)]
    assert got == [
        ("notes/a.md", "t1", None, False),
        ("with space.md", "t2", None, False),
        ("My Note.md", "t3", "Some Part", False),
        ("https://example.org/x?q=1#frag", "t4", None, True),
        ("//cdn/x.js", "t7", None, True),
        ("n.md", "nested [x] label", None, False),
        ("spaced.md", "t9", None, False),
    ]


def test_code_spans_hide_links() -> None:
    body = (
        "a `[[no1]]` b ``[[no2]] ` still`` c [[yes1]] "
        "```[[no3]]``` then `unclosed [[yes2]] and `` [[yes3]]"
    )
    assert [t for _, t in _targets(body)] == ["yes1", "yes2", "yes3"]


def test_code_span_does_not_cross_paragraphs() -> None:
    body = "start ` open\n\n[[yes]] and ` close"
    assert [t for _, t in _targets(body)] == ["yes"]
    body2 = "start ` open\n[[no]] and ` close"
    assert _targets(body2) == []


def test_escapes() -> None:
    assert _targets(r"\[[not]] and \[x](y.md) but \\[[yes]]") == [("wikilink", "yes")]
    # an escaped backtick does not open a code span
    assert _targets(r"\`[[yes]]`") == [("wikilink", "yes")]


def test_link_text_may_contain_code() -> None:
    links = extract("[the `cfg` file](cfg.md)")
    assert [(lk.target, lk.label) for lk in links] == [("cfg.md", "the `cfg` file")]


FENCED = """[[before]]
```python
[[in-backtick-fence]]
~~~
[[still-in]]
```
[[between]]
~~~~
[[in-tilde]]
~~~
[[still-in-tilde]]
~~~~~~
[[after]]
````
[[unclosed]]
```
[[unclosed-too]]
"""


def test_fences() -> None:
    assert [t for _, t in _targets(FENCED)] == ["before", "between", "after"]


def test_backtick_fence_info_with_backtick_is_not_a_fence() -> None:
    body = "``` a`b\n[[seen]]\n"
    assert [t for _, t in _targets(body)] == ["seen"]


def test_indented_code_blocks() -> None:
    body = (
        "para\n\n    [[in-code]]\n    more\n\n[[out]]\n"
        "text line\n    [[continuation-is-text]]\n\n"
        "- list item\n\n    [[list-content]]\n"
    )
    assert [t for _, t in _targets(body)] == ["out", "continuation-is-text", "list-content"]


SECTIONS_BODY = """preamble [[p]]
# Title

intro
## Input
the input
### Detail
deep
## Output
```
# not a heading
```
out text
# Second #
end
"""


def test_sections() -> None:
    secs = sections(SECTIONS_BODY)
    assert [(s.level, s.heading) for s in secs] == [
        (1, "Title"),
        (2, "Input"),
        (3, "Detail"),
        (2, "Output"),
        (1, "Second"),
    ]
    inp = secs[1]
    assert inp.text == "## Input\nthe input\n### Detail\ndeep\n"
    assert SECTIONS_BODY[inp.start : inp.end] == inp.text
    assert secs[0].text.startswith("# Title\n") and secs[0].text.endswith("out text\n")
    assert secs[4].text == "# Second #\nend\n"


def test_section_lookup() -> None:
    assert section(SECTIONS_BODY, "input") == "## Input\nthe input\n### Detail\ndeep\n"
    assert section(SECTIONS_BODY, "## OUTPUT") == "## Output\n```\n# not a heading\n```\nout text\n"
    assert section(SECTIONS_BODY, "not a heading") is None
    assert section(SECTIONS_BODY, "missing") is None
    assert sections("#hashtag is not a heading\n####### seven\n") == []


@pytest.mark.parametrize(
    ("fm", "body", "expected"),
    [
        ({"title": "From FM"}, "# Heading\n", "From FM"),
        ({"title": "  "}, "# Heading\n", "Heading"),
        ({"title": 42}, "text\n## Sub\n# Main Title\n", "Main Title"),
        ({}, "```\n# code\n```\nno heading", "my-note"),
        ({}, "", "my-note"),
    ],
)
def test_title_of(fm: dict[str, object], body: str, expected: str) -> None:
    assert title_of(fm, body, Path("dir/my-note.md")) == expected
    assert title_of(fm, body, "dir/my-note.md") == expected


_name = st.text(
    alphabet=st.characters(
        blacklist_characters="[]|#`\\\n\r\x00()<>\"' \t", blacklist_categories=("Cs", "Zs", "Cc")
    ),
    min_size=1,
    max_size=15,
)
_words = st.text(alphabet="abc xyz,.;", max_size=20)


@st.composite
def _link_source(draw: st.DrawFn) -> tuple[str, str, str]:
    target = draw(_name).strip() or "x"
    form = draw(st.sampled_from(["wiki", "wiki-label", "wiki-heading", "embed", "md"]))
    if form == "wiki":
        return f"[[{target}]]", "wikilink", target
    if form == "wiki-label":
        return f"[[{target}|{draw(_words)}]]", "wikilink", target
    if form == "wiki-heading":
        return f"[[{target}#{draw(_name)}]]", "wikilink", target
    if form == "embed":
        return f"![[{target}]]", "embed", target
    target = target.lstrip(":#")  # keep it a local, non-anchor target
    if not target or "%" in target or ":" in target:
        target = "note.md"
    return f"[{draw(_words)}]({target})", "markdown", target


@settings(max_examples=200, deadline=None)
@given(
    items=st.lists(_link_source(), min_size=1, max_size=5),
    filler=_words,
    hide=st.sampled_from(["span", "double-span", "fence", "tilde", "indented"]),
)
def test_links_found_outside_code_and_not_inside(
    items: list[tuple[str, str, str]], filler: str, hide: str
) -> None:
    visible = (" " + filler + " ").join(src for src, _, _ in items)
    assert _targets(visible) == [(kind, target) for _, kind, target in items]
    if hide == "span":
        hidden = f"x `{visible.replace('`', '')}` y"
    elif hide == "double-span":
        hidden = f"x `` a ` {visible} `` y"
    elif hide == "fence":
        hidden = f"intro\n```\n{visible}\n```\n"
    elif hide == "tilde":
        hidden = f"intro\n~~~~ info\n{visible}\n~~~~~\n"
    else:
        hidden = f"intro\n\n    {visible}\n"
    assert _targets(hidden) == []
    # a link after the hidden region is still seen
    assert _targets(hidden + "\n\n[[tail]]") == [("wikilink", "tail")]


def test_extract_speed() -> None:
    line = (
        "We talked through the release plan and the open questions about storage. The notes "
        "in [the design doc](docs/design.md#storage) cover it; `make test` must pass first.\n"
    )
    body = (
        "# Weekly sync\n\nAttendees: [[Alice]], [[Bob|Robert]].\n\n"
        + line * 8
        + "\n```bash\nmake test [[not-a-link]]\n```\n\n## Actions\n\n"
        + "- [ ] write the [[migration plan]]\n- [ ] review ![[diagram.png]]\n"
        + "More prose here to pad the document. " * 12
    )
    assert 1800 < len(body.encode()) < 2500
    assert len(extract(body)) == 12
    n = 2000
    start = time.process_time()
    for _ in range(n):
        extract(body)
    rate = n / (time.process_time() - start)
    assert rate > 2500, rate  # floor for slow CI; see the report for measured figures


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
