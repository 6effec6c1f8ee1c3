"""PROGRAM.md read as data: identity, bundles and scopes, budgets, thresholds, snapshot.

The format (also written at the top of the template):

- ``## <Section>`` headings split the file. Text before the first one is free.
- ``## Identity`` and ``## Notes`` hold free text.
- ``## Bundles``, ``## Budgets``, ``## Thresholds`` and ``## Snapshot`` are data sections:
  every non-blank line is ``- key: value`` (``*`` works too; the key may be in backticks);
  lines starting with ``>`` are comments. For bundles the key is the bundle name and the
  value its scope.

Anything else is a :class:`~memdir.errors.ProgramError` naming the file and line. The same
section grammar serves ``HARNESS.md`` (see :mod:`memdir.engine.harness`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from ..errors import InvalidInput, MemdirError, ProgramError
from ..records import asdict, field, recordclass, replace
from ..records import fields as record_fields

_HEADING = re.compile(r"^##\s+(?P<name>.+?)\s*#*\s*$")
_ITEM = re.compile(r"^[-*]\s+`?(?P<key>[^`:]+?)`?\s*:\s*(?P<value>.*?)\s*$")
BUNDLE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

E = TypeVar("E", bound=MemdirError)


@recordclass(frozen=True)
class Item:
    """One ``- key: value`` line of a data section."""

    key: str
    value: str
    line: int


@recordclass(frozen=True)
class Section:
    name: str
    line: int
    lines: tuple[tuple[int, str], ...]  # (1-based line number, text) after the heading

    def text(self) -> str:
        return "\n".join(t for _, t in self.lines).strip()


def split_sections(text: str, source: str, error: type[E]) -> dict[str, Section]:
    """Split on ``## `` headings (outside fenced code); section names are lowercased."""
    sections: dict[str, Section] = {}
    name: str | None = None
    start = 0
    body: list[tuple[int, str]] = []
    fenced = False

    def close() -> None:
        if name is not None:
            sections[name] = Section(name, start, tuple(body))

    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else _HEADING.match(line)
        if match:
            close()
            name = match.group("name").strip().lower()
            if name in sections:
                raise error(f"{source}:{number}: section '## {match.group('name')}' repeats")
            start, body = number, []
        elif name is not None:
            body.append((number, line))
    close()
    return sections


def data_items(section: Section, source: str, error: type[E]) -> list[Item]:
    """The ``- key: value`` items of a data section; any other line is an error."""
    items: list[Item] = []
    seen: dict[str, int] = {}
    for number, line in section.lines:
        stripped = line.strip()
        if not stripped or stripped.startswith(">") or stripped.startswith("<!--"):
            continue
        match = _ITEM.match(stripped)
        if not match:
            raise error(
                f"{source}:{number}: expected '- key: value' in section "
                f"'## {section.name}', got {stripped!r}"
            )
        key = match.group("key").strip()
        if key in seen:
            raise error(f"{source}:{number}: '{key}' repeats (first at line {seen[key]})")
        seen[key] = number
        items.append(Item(key, match.group("value").strip(), number))
    return items


@recordclass(frozen=True)
class Bundle:
    name: str
    scope: str


@recordclass(frozen=True)
class Budgets:
    index_reads: int = 6
    article_bodies: int = 3
    search_hits: int = 5
    topic_max_articles: int = 25
    key_points: int = 5
    takeaways: int = 3
    related: int = 5


@recordclass(frozen=True)
class Thresholds:
    routing: float = 0.15
    quarantine: float = 0.05
    distill_age_days: int = 14


@recordclass(frozen=True)
class SnapshotPolicy:
    token_cap: int = 1500
    recent_episodes: int = 5
    lessons: int = 10


@recordclass(frozen=True)
class Program:
    identity: str = ""
    bundles: tuple[Bundle, ...] = ()
    budgets: Budgets = field(default_factory=Budgets)
    thresholds: Thresholds = field(default_factory=Thresholds)
    snapshot: SnapshotPolicy = field(default_factory=SnapshotPolicy)

    def bundle(self, name: str) -> Bundle | None:
        return next((b for b in self.bundles if b.name == name), None)


_FREE = {"identity", "notes"}
_DATA = {"bundles", "budgets", "thresholds", "snapshot"}


def _number(item: Item, kind: type, source: str, low: float, high: float | None) -> Any:
    try:
        value = int(item.value) if kind is int else float(item.value)
    except ValueError:
        raise ProgramError(
            f"{source}:{item.line}: '{item.key}' must be "
            f"{'an integer' if kind is int else 'a number'}, got {item.value!r}"
        ) from None
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ProgramError(f"{source}:{item.line}: '{item.key}' must be {bound}, got {value}")
    return value


_T = TypeVar("_T")


def _fill(cls: type[_T], items: list[Item], source: str, rule: Callable[[Item, type], Any]) -> _T:
    fields = {f.name: f for f in record_fields(cls)}
    values: dict[str, Any] = {}
    for item in items:
        f = fields.get(item.key)
        if f is None:
            raise ProgramError(
                f"{source}:{item.line}: unknown key '{item.key}' "
                f"(known: {', '.join(sorted(fields))})"
            )
        values[item.key] = rule(item, type(f.default))
    return cls(**values)


def parse(text: str, source: str = "PROGRAM.md") -> Program:
    """Parse PROGRAM.md; raise ProgramError pointing at the offending line."""
    sections = split_sections(text, source, ProgramError)
    for name, section in sections.items():
        if name not in _FREE | _DATA:
            raise ProgramError(
                f"{source}:{section.line}: unknown section '## {name}' "
                f"(known: {', '.join(sorted(s.title() for s in _FREE | _DATA))})"
            )
    identity = ""
    if "identity" in sections:
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", sections["identity"].text())]
        identity = next((" ".join(p.split()) for p in paragraphs if p), "")
    bundles: list[Bundle] = []
    if "bundles" in sections:
        for item in data_items(sections["bundles"], source, ProgramError):
            if not BUNDLE_NAME.match(item.key):
                raise ProgramError(
                    f"{source}:{item.line}: bundle name {item.key!r} must be lowercase letters, "
                    "digits, '-' or '_'"
                )
            if not item.value:
                raise ProgramError(f"{source}:{item.line}: bundle '{item.key}' has an empty scope")
            bundles.append(Bundle(item.key, item.value))

    def budget(item: Item, kind: type) -> Any:
        return _number(item, int, source, 1, None)

    def threshold(item: Item, kind: type) -> Any:
        if kind is int:
            return _number(item, int, source, 0, None)
        return _number(item, float, source, 0.0, 1.0)

    def snap(item: Item, kind: type) -> Any:
        return _number(item, int, source, 1 if item.key != "token_cap" else 100, None)

    def items(name: str) -> list[Item]:
        return data_items(sections[name], source, ProgramError) if name in sections else []

    return Program(
        identity=identity,
        bundles=tuple(bundles),
        budgets=_fill(Budgets, items("budgets"), source, budget),
        thresholds=_fill(Thresholds, items("thresholds"), source, threshold),
        snapshot=_fill(SnapshotPolicy, items("snapshot"), source, snap),
    )


def with_settings(program: Program, engine: Any) -> Program:
    """Apply ``[engine]`` settings that differ from their defaults (they win over the file)."""
    from ..settings import EngineSettings

    default = EngineSettings()
    thresholds = program.thresholds
    snapshot = program.snapshot
    if engine.quarantine_threshold != default.quarantine_threshold:
        thresholds = replace(thresholds, quarantine=engine.quarantine_threshold)
    if engine.distill_age_days != default.distill_age_days:
        thresholds = replace(thresholds, distill_age_days=engine.distill_age_days)
    if engine.snapshot_token_cap != default.snapshot_token_cap:
        snapshot = replace(snapshot, token_cap=engine.snapshot_token_cap)
    return replace(program, thresholds=thresholds, snapshot=snapshot)


def _bundle_lines(text: str) -> Iterator[tuple[int, str]]:
    sections = split_sections(text, "PROGRAM.md", ProgramError)
    if "bundles" in sections:
        yield from sections["bundles"].lines


def add_bundle(text: str, name: str, scope: str) -> str:
    """PROGRAM.md text with bundle ``name`` added (or its scope replaced)."""
    # The caller's input (InvalidInput, a 400), not a PROGRAM.md that does not parse.
    if not BUNDLE_NAME.match(name):
        raise InvalidInput(
            f"bundle name {name!r} must be lowercase letters, digits, '-' or '_' (max 63)"
        )
    scope = " ".join(scope.split())
    if not scope:
        raise InvalidInput(f"bundle '{name}' needs a non-empty scope")
    parse(text)  # refuse to edit a file that does not parse
    lines = text.splitlines()
    entry = f"- {name}: {scope}"
    existing = [
        n
        for n, line in _bundle_lines(text)
        if (m := _ITEM.match(line.strip())) and m["key"] == name
    ]
    if existing:
        lines[existing[0] - 1] = entry
    else:
        section = split_sections(text, "PROGRAM.md", ProgramError).get("bundles")
        if section is None:
            lines += ["", "## Bundles", "", entry]
        else:
            last = section.line
            for number, line in section.lines:
                if line.strip():
                    last = number
            lines.insert(last, entry)
    return "\n".join(lines) + "\n"


def remove_bundle(text: str, name: str) -> str:
    """PROGRAM.md text without bundle ``name`` (NotFound when absent)."""
    from ..errors import NotFound

    parse(text)
    for number, line in _bundle_lines(text):
        m = _ITEM.match(line.strip())
        if m and m["key"] == name:
            lines = text.splitlines()
            del lines[number - 1]
            return "\n".join(lines) + "\n"
    raise NotFound(f"no bundle named '{name}' in PROGRAM.md")


def as_dict(program: Program) -> Mapping[str, Any]:
    """A JSON-ready view (for ``--json`` outputs and work packets)."""
    return asdict(program)
