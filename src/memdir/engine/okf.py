"""OKF v0.2 in memdir's bundles: index lines (§8), logs (§9) and the conformance check.

Index entries are ``* [Title](relative-url) - description`` lines under headings. A log is
``## YYYY-MM-DD`` groups, newest first. A bundle conforms when every non-reserved ``.md`` file
has parseable frontmatter with a non-empty string ``type``, every index and log follows its
reserved structure, and the bundle-root ``index.md`` declares ``okf_version: "0.2"``.
"""

from __future__ import annotations

import datetime as _dt
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

from ..doc import frontmatter, links
from ..records import recordclass

OKF_VERSION = "0.2"
RESERVED = ("index.md", "log.md")
_ENTRY = re.compile(
    r"^[*-] \[(?P<title>(?:\\.|[^\]\\])+)\]\((?P<url>[^)\s]+)\)(?: - (?P<desc>.*))?$"
)
_DATE_HEADING = re.compile(r"^## (\d{4}-\d{2}-\d{2})(?::.*)?$")


@recordclass(frozen=True)
class Entry:
    title: str
    url: str
    description: str = ""

    @property
    def path(self) -> str:
        """The relative path the entry's URL names (percent-decoded)."""
        return unquote(self.url)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def url_for(path: str) -> str:
    """A relative path as a link URL: each segment percent-encoded, ``/`` kept.

    A file or folder name with a space, a parenthesis or a ``#`` would otherwise end or split
    the ``(url)`` of a link; ``quick notes.md`` becomes ``quick%20notes.md``.
    """
    return quote(path, safe="/")


def link_text(title: str) -> str:
    """A title as link text: one line, with backslashes and brackets escaped."""
    return _one_line(title).replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def render_entry(entry: Entry) -> str:
    """One OKF §8 index line; brackets in titles are escaped, descriptions are one line."""
    line = f"* [{link_text(entry.title) or 'untitled'}]({entry.url})"
    description = _one_line(entry.description)
    return f"{line} - {description}" if description else line


def parse_entry(line: str) -> Entry | None:
    """The entry of an index line, or None when the line is not one."""
    match = _ENTRY.match(line.rstrip())
    if not match:
        return None
    title = re.sub(r"\\(.)", r"\1", match.group("title"))
    return Entry(title, match.group("url"), match.group("desc") or "")


def entries(text: str) -> list[Entry]:
    """Every entry line of an index document (frontmatter skipped)."""
    body = frontmatter.parse(text).body
    return [e for line in body.splitlines() if (e := parse_entry(line)) is not None]


def render_index(
    title: str,
    groups: Sequence[tuple[str, Sequence[Entry]]],
    *,
    root: bool = False,
) -> str:
    """An index document: a title, then each group as a heading and its entry lines.

    ``root`` adds the ``okf_version`` frontmatter that a bundle-root index carries.
    """
    lines = [f"# {_one_line(title)}", ""]
    for heading, items in groups:
        if heading:
            lines += [f"## {_one_line(heading)}", ""]
        lines += [render_entry(e) for e in items]
        lines.append("")
    body = "\n".join(lines).rstrip("\n") + "\n"
    if root:
        return f'---\nokf_version: "{OKF_VERSION}"\n---\n' + body
    return body


@recordclass(frozen=True)
class LogEntry:
    date: str  # YYYY-MM-DD
    text: str


def log_date(value: object, default: str = "1970-01-01") -> str:
    """The ``YYYY-MM-DD`` a log groups an entry under: the date ``value`` starts with.

    ``value`` is a date or an RFC 3339 time as frontmatter holds it (``generated.at``); any
    other value (``last tuesday``, a number, nothing) gives ``default``, so that a log heading
    is always a real date.
    """
    text = value.strip() if isinstance(value, str) else ""
    head = text[:10]
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", head) and (len(text) == 10 or text[10] in "Tt "):
        try:
            _dt.date.fromisoformat(head)
        except ValueError:
            return default
        return head
    return default


def render_log(title: str, items: Iterable[LogEntry]) -> str:
    """A §9 log: ``## YYYY-MM-DD`` groups newest first, list items inside (order kept)."""
    by_date: dict[str, list[str]] = {}
    for item in items:
        by_date.setdefault(item.date, []).append(_one_line(item.text))
    lines = [f"# {_one_line(title)}", ""]
    for date in sorted(by_date, reverse=True):
        lines += [f"## {date}", ""]
        lines += [f"- {t}" for t in by_date[date]]
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def check_index(text: str, *, root: bool) -> list[str]:
    """Structure problems of an index document (empty when it follows §8)."""
    problems: list[str] = []
    parsed = frontmatter.parse(text)
    if root:
        if parsed.error or str(parsed.fm.get("okf_version", "")) != OKF_VERSION:
            problems.append(f'bundle-root index.md must declare okf_version: "{OKF_VERSION}"')
    elif parsed.has_block:
        problems.append("only the bundle-root index.md may carry frontmatter")
    fenced = False
    for number, line in enumerate(parsed.body.splitlines(), start=1):
        if line.strip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced or not line.strip():
            continue
        if re.match(r"^\s*[*-] ", line) and parse_entry(line.strip()) is None:
            problems.append(f"line {number}: list item is not '* [Title](url) - description'")
    return problems


def check_log(text: str) -> list[str]:
    """Structure problems of a log document (empty when it follows §9)."""
    problems: list[str] = []
    parsed = frontmatter.parse(text)
    if parsed.has_block:
        problems.append("log.md carries no frontmatter")
    dates: list[str] = []
    for number, line in enumerate(parsed.body.splitlines(), start=1):
        if line.startswith("## "):
            match = _DATE_HEADING.match(line.rstrip())
            if not match:
                problems.append(f"line {number}: log headings are '## YYYY-MM-DD'")
            else:
                dates.append(match.group(1))
    if dates != sorted(dates, reverse=True):
        problems.append("log entries are not newest first")
    return problems


@recordclass(frozen=True)
class Reference:
    """One cross-reference of a bundle file: what names another file.

    ``kind`` is ``related`` (a frontmatter ``related`` entry, bundle-relative: ``/topic/x.md``,
    or ``../<bundle>/topic/x.md`` for another bundle), ``link`` (a markdown link of the body,
    relative to the file's folder), ``index`` (an index entry) or ``source`` (a
    ``sources[].resource``, relative to the store root, or the repository root of a published
    bundle). ``path`` is the target made bundle-relative and normalised: ``topic/x.md`` inside
    the bundle, ``../<bundle>/topic/x.md`` in another bundle, None when it leaves the wiki
    (``../../x``) or is absolute. For a ``source`` it is the resource, or None when the
    resource is not a plain relative path.
    """

    file: str
    kind: str
    target: str
    path: str | None

    @property
    def bundle(self) -> str | None:
        """The other bundle a ``../<bundle>/...`` path names (None inside this bundle)."""
        if self.kind == "source" or not self.path or not self.path.startswith("../"):
            return None
        return self.path.split("/")[1]


def _bundle_path(folder: str, target: str) -> str | None:
    joined = target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
    path = posixpath.normpath(joined)
    parts = path.split("/")
    ups = len(parts) - len([p for p in parts if p != ".."])
    if path in (".", "..") or ups > 1 or (ups == 1 and (parts[0] != ".." or len(parts) < 3)):
        return None
    if any(p in ("", ".") or p.startswith(".") for p in parts[ups:]):
        return None  # a dot-folder (.git) or an empty segment is never a target
    return path


def plain_relative(path: str) -> bool:
    """A path that stays where it is read: relative, no ``..``, no dot-folder, no backslash."""
    parts = path.split("/")
    return bool(path) and "\\" not in path and all(p and not p.startswith(".") for p in parts)


def references(path: str, fm: Mapping[str, Any], body: str) -> list[Reference]:
    """Every cross-reference of the bundle file ``path`` (bundle-relative)."""
    folder = posixpath.dirname(path)
    out: list[Reference] = []
    related = fm.get("related")
    for item in related if isinstance(related, list) else []:
        if isinstance(item, str) and item.strip():
            out.append(Reference(path, "related", item, _bundle_path("", item.strip())))
    for link in links.extract(body):
        if link.kind != "markdown" or link.external:
            continue
        target = link.target.split("#", 1)[0]
        if target:
            out.append(Reference(path, "link", target, _bundle_path(folder, target)))
    sources = fm.get("sources")
    for item in sources if isinstance(sources, list) else []:
        resource = item.get("resource") if isinstance(item, dict) else None
        if isinstance(resource, str) and resource.strip() and "://" not in resource:
            value = resource.strip()
            out.append(Reference(path, "source", value, value if plain_relative(value) else None))
    return out


def index_references(path: str, text: str) -> list[Reference]:
    folder = posixpath.dirname(path)
    return [
        Reference(path, "index", e.url, _bundle_path(folder, e.path))
        for e in entries(text)
        if "://" not in e.url
    ]


def conformance(
    files: Mapping[str, str], *, resolve: Callable[[Reference], bool] | None = None
) -> list[str]:
    """OKF v0.2 violations of one bundle; ``files`` maps bundle-relative paths to text.

    With ``resolve``, every cross-reference (:func:`references`, index entries) is also
    asked of it, and one that does not resolve is a violation: the verdict then says
    whether the bundle stands on its own. An empty list means the bundle is conformant.
    """
    violations: list[str] = []
    if "index.md" not in files:
        violations.append("index.md: missing bundle-root index")
    for path in sorted(files):
        if not path.lower().endswith(".md"):
            continue
        text = files[path]
        name = path.rsplit("/", 1)[-1]
        if name == "index.md":
            violations += [f"{path}: {p}" for p in check_index(text, root=path == "index.md")]
        elif name == "log.md":
            violations += [f"{path}: {p}" for p in check_log(text)]
        else:
            parsed = frontmatter.parse(text)
            kind = parsed.fm.get("type")
            if not parsed.has_block:
                violations.append(f"{path}: no frontmatter")
            elif parsed.error:
                violations.append(f"{path}: frontmatter does not parse ({parsed.error})")
            elif not isinstance(kind, str) or not kind.strip():
                violations.append(f"{path}: frontmatter has no non-empty 'type'")
        if resolve is None:
            continue
        if name == "index.md":
            refs = index_references(path, text)
        elif name == "log.md":
            refs = []
        else:
            parsed = frontmatter.parse(text)
            refs = references(path, parsed.fm if not parsed.error else {}, parsed.body)
        for ref in refs:
            if not resolve(ref):
                violations.append(f"{path}: {ref.kind} '{ref.target}' does not resolve")
    return violations
