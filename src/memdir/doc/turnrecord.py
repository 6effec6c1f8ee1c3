"""The turn-record format: one markdown file per agent turn, and its work log beside it.

A record lives at ``episodes/turns/YYYY/MM/DD/<id>.md`` (the date is the UTC day
encoded in the id) with the raw work log beside it as ``<id>.worklog.jsonl``,
stored exactly as given. The record's frontmatter holds ``episode_id``,
``memory_kind: episodic``, ``type: turn``, ``thread``, ``user``, ``channel``,
``parents``, ``keywords`` and ``created``; its body has the sections
``## Input``, ``## Compact`` and ``## Output``.

Input and output are stored verbatim. When one of them contains a level-1 or
level-2 heading line (or starts with a backtick), it is wrapped in a backtick
fence longer than any backtick run inside it, so the record's own sections stay
unambiguous and :func:`parse_turn` gives the text back exactly.

Rendering, parsing and the checks on a record's fields live here, below the index and
the turn verbs, so every reader of a record (the index, the vectors, the context pack,
the verbs) calls one implementation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import InvalidDocument, InvalidInput, MemdirError
from ..records import field, recordclass
from . import frontmatter, links, paths
from .ids import id_time_ms
from .lazyregex import LazyRegex
from .text import bad_char, unicode_text

TURNS_DIR = "episodes/turns"
TURN_TYPE = "turn"
WORKLOG_SUFFIX = ".worklog.jsonl"
MAX_NAME_CHARS = 200
MAX_KEYWORDS = 50
MAX_PARENTS = 100

_ID_RE = LazyRegex(r"^[0-9abcdefghjkmnpqrstvwxyz]{26}$")
_HEADING_RE = LazyRegex(r"^ {0,3}#{1,2}(?:[ \t]|$)", re.MULTILINE)
_BACKTICKS_RE = LazyRegex(r"`+")
_INPUT_HEAD = "## Input\n\n"
_COMPACT_SEP = "\n\n## Compact\n\n"
_OUTPUT_SEP = "\n\n## Output\n\n"


# -- the record ----------------------------------------------------------------


@recordclass(frozen=True)
class TurnRecord:
    """One turn. ``extra`` holds further frontmatter (compactor, compact_error, derived-from)."""

    id: str
    thread: str
    user: str = ""
    channel: str = ""
    parents: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    created: str = ""
    input: str = ""
    compact: str = ""
    output: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return turn_path(self.id)

    @property
    def worklog_path(self) -> str:
        return worklog_path(self.id)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the frontmatter fields, the sections and the paths."""
        out: dict[str, Any] = {
            "id": self.id,
            "path": self.path,
            "thread": self.thread,
            "user": self.user,
            "channel": self.channel,
            "parents": list(self.parents),
            "keywords": list(self.keywords),
            "created": self.created,
        }
        # a hand-edited record may hold .nan or .inf, which JSON has no form for
        out.update({k: frontmatter.json_value(v) for k, v in self.extra.items() if k not in out})
        out.update({"input": self.input, "compact": self.compact, "output": self.output})
        return out


def is_turn_id(value: object) -> bool:
    return isinstance(value, str) and bool(_ID_RE.match(value))


def _day(ident: str) -> datetime:
    return datetime.fromtimestamp(id_time_ms(ident) / 1000, tz=UTC)


def not_a_turn_id(value: object) -> str:
    return f"not a turn id: {value!r} (expected a 26-character memdir id)"


def turn_path(ident: str) -> str:
    """``episodes/turns/YYYY/MM/DD/<id>.md`` for a turn id (UTC day of the id's time)."""
    if not is_turn_id(ident):
        raise InvalidInput(not_a_turn_id(ident))
    return f"{TURNS_DIR}/{_day(ident):%Y/%m/%d}/{ident}.md"


def worklog_path(ident: str) -> str:
    return turn_path(ident)[: -len(".md")] + WORKLOG_SUFFIX


def created_of(ident: str) -> str:
    """RFC 3339 UTC time (milliseconds) encoded in the id."""
    ms = id_time_ms(ident)
    stamp = datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ms % 1000:03d}Z"


# -- validation ----------------------------------------------------------------


# The ranges of a DAG walk and of a thread listing (the CLI and HTTP API use the same).


def in_range(name: str, value: object, top: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
        raise InvalidInput(f"{name} must be a whole number from 1 to {top}, got {value!r}")


def validate_name(kind: str, value: object, *, required: bool) -> str:
    """A thread, user or channel id: no path separators, no control characters."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise InvalidInput(f"{kind} must be a string, got {type(value).__name__}")
    if not value:
        if required:
            raise InvalidInput(f"{kind} is required")
        return ""
    if value != value.strip():
        raise InvalidInput(f"{kind} id {value!r} has leading or trailing whitespace")
    if "/" in value or "\\" in value:
        raise InvalidInput(f"{kind} id {value!r} must not contain path separators (/ or \\)")
    bad = bad_char(value)
    if bad is not None:
        raise InvalidInput(f"{kind} id {value!r} contains a control character ({bad!r})")
    if value in {".", ".."}:
        raise InvalidInput(f"{kind} id {value!r} is not allowed")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidInput(f"{kind} id is longer than {MAX_NAME_CHARS} characters")
    return value


def validate_keywords(values: object) -> tuple[str, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        values = re.split(r"[,\n]", values)
    if not isinstance(values, Iterable):
        raise InvalidInput("keywords must be a list of strings")
    out: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise InvalidInput(f"keyword must be a string, got {value!r}")
        word = value.strip()
        if not word:
            continue
        bad = bad_char(word)
        if bad is not None:
            raise InvalidInput(f"keyword {word!r} contains a control character")
        if len(word) > MAX_NAME_CHARS:
            raise InvalidInput(f"keyword longer than {MAX_NAME_CHARS} characters")
        if word not in out:
            out.append(word)
    if len(out) > MAX_KEYWORDS:
        raise InvalidInput(f"at most {MAX_KEYWORDS} keywords")
    return tuple(out)


def validate_parent_ids(values: object, own_id: str | None = None) -> tuple[str, ...]:
    """Parents: turn ids and document paths (``wiki/bread/starter.md``: any memory the turn
    used), well-formed, deduplicated in order, never the record's own id.

    A path is given in its normal form (:func:`memdir.doc.paths.normalize`) and names a
    markdown file; whether it exists is the turn log's check.
    """
    if values is None:
        return ()
    if isinstance(values, str):
        values = [v for v in re.split(r"[,\s]+", values) if v]
    if not isinstance(values, Iterable):
        raise InvalidInput("parents must be a list of turn ids or document paths")
    out: list[str] = []
    for value in values:
        if not isinstance(value, str):
            raise InvalidInput(f"parent id must be a string, got {value!r}")
        ident = value.strip()
        bad = bad_char(ident)
        if bad is not None:
            raise InvalidInput(f"parent id {ident!r} contains a control character ({bad!r})")
        if own_id is not None and ident == own_id:
            raise InvalidInput(f"a turn cannot be its own parent: {ident}")
        if not is_turn_id(ident):
            ident = parent_path(ident)
        if ident not in out:
            out.append(ident)
    if len(out) > MAX_PARENTS:
        raise InvalidInput(f"at most {MAX_PARENTS} parents")
    return tuple(out)


def parent_path(value: str) -> str:
    """A parent that is no turn id, as the document path it must be (normal form)."""
    try:
        norm = paths.normalize(value)
    except MemdirError as exc:
        raise InvalidInput(
            f"parent {value!r} is neither a turn id nor a document path: {exc.message}"
        ) from None
    if not paths.is_markdown(norm):
        raise InvalidInput(
            f"parent {value!r} is neither a turn id nor a document path (a .md file of the store)"
        )
    return norm


def check_text(kind: str, value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{kind} must be a string, got {type(value).__name__}")
    return unicode_text(kind, value)


# -- work logs -----------------------------------------------------------------


def parse_worklog(data: bytes | str) -> list[dict[str, Any]]:
    """Validate JSON Lines (one object per line; blank lines allowed); return the entries."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"work log is not valid UTF-8: {exc}") from None
    else:
        text = data
    entries: list[dict[str, Any]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise InvalidInput(f"work log line {number} is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise InvalidInput(
                f"work log line {number} must be a JSON object, got {type(value).__name__}"
            )
        entries.append(value)
    return entries


def worklog_from(value: object) -> tuple[bytes, list[dict[str, Any]]]:
    """The sidecar bytes and parsed entries for a work log given as a list or as JSONL.

    JSONL (``str`` or ``bytes``) is kept byte for byte; a list is written one
    compact JSON object per line.
    """
    if value is None:
        return b"", []
    if isinstance(value, bytes | str):
        raw = value.encode("utf-8") if isinstance(value, str) else value
        return raw, parse_worklog(raw)
    if isinstance(value, Mapping) or not isinstance(value, Sequence):
        raise InvalidInput("work log must be a list of JSON objects or JSON Lines text")
    lines: list[str] = []
    entries: list[dict[str, Any]] = []
    for number, entry in enumerate(value, start=1):
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"work log entry {number} must be an object")
        try:
            line = json.dumps(entry, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(f"work log entry {number} is not JSON: {exc}") from None
        unicode_text(f"work log entry {number}", line)  # JSON escapes NUL; not a surrogate
        lines.append(line + "\n")
        entries.append(json.loads(line))
    return "".join(lines).encode("utf-8"), entries


# -- rendering and parsing -----------------------------------------------------


def _yaml_str(value: str) -> str:
    """A YAML double-quoted scalar (JSON escapes, plus escapes for YAML-unprintable chars)."""
    out = json.dumps(value, ensure_ascii=False)
    if out.isprintable():  # JSON has escaped every control character already
        return out
    chars = []
    for ch in out:
        if ch.isprintable():
            chars.append(ch)
        else:
            code = ord(ch)
            chars.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return "".join(chars)


def _yaml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_yaml_str(v) for v in values) + "]"


def encode_section(text: str) -> str:
    """``text`` as a section body: verbatim, or fenced when it would look like a heading."""
    if not _HEADING_RE.search(text) and not text.startswith("`"):
        return text
    longest = max((len(m) for m in _BACKTICKS_RE.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _decode_section(body: str, start: int, sep: str | None) -> tuple[str, int]:
    """Read one section body from ``start``; return it and where ``sep`` begins."""
    if body.startswith("```", start):
        nl = body.find("\n", start)
        opener = body[start:nl] if nl >= 0 else ""
        fence = opener[: len(opener) - len(opener.lstrip("`"))]
        if nl < 0 or opener != fence + "text":
            raise InvalidDocument("turn record: malformed fenced section")
        close = body.find("\n" + fence + (sep or "\n"), nl)
        if close < 0:
            raise InvalidDocument("turn record: unterminated fenced section")
        return body[nl + 1 : close], close + 1 + len(fence)
    if sep is None:
        end = len(body) - 1 if body.endswith("\n") else len(body)
        return body[start:end], end
    end = body.find(sep, start)
    if end < 0:
        raise InvalidDocument(f"turn record: missing section {sep.strip()!r}")
    return body[start:end], end


def render_turn(record: TurnRecord) -> str:
    """The markdown text of a record (frontmatter, then Input, Compact, Output)."""
    lines = [
        "---",
        f"episode_id: {_yaml_str(record.id)}",
        "memory_kind: episodic",
        f"type: {TURN_TYPE}",
        f"thread: {_yaml_str(record.thread)}",
        f"user: {_yaml_str(record.user)}",
        f"channel: {_yaml_str(record.channel)}",
        f"parents: {_yaml_list(record.parents)}",
        f"keywords: {_yaml_list(record.keywords)}",
        f"created: {_yaml_str(record.created)}",
    ]
    for key, value in record.extra.items():
        if key == "derived-from":
            continue  # the store appends provenance itself
        if isinstance(value, bool | int):
            lines.append(f"{key}: {json.dumps(value)}")
        else:
            lines.append(f"{key}: {_yaml_str(str(value))}")
    lines.append("---")
    compact = record.compact.strip("\n")
    body = (
        _INPUT_HEAD
        + encode_section(record.input)
        + _COMPACT_SEP
        + compact
        + _OUTPUT_SEP
        + encode_section(record.output)
        + "\n"
    )
    return "\n".join(lines) + "\n\n" + body


def split_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    if not text.startswith("---"):
        raise InvalidDocument("turn record has no frontmatter")
    found = frontmatter.split(text)
    if found is None:
        raise InvalidDocument("turn record frontmatter is not closed")
    # The store's own reader: the same YAML rules (aliases refused) as every document.
    try:
        fm = frontmatter.load_strict(found[0])
    except InvalidDocument as exc:
        raise InvalidDocument(f"turn record frontmatter: {exc.message}") from None
    if not isinstance(fm, dict):
        raise InvalidDocument("turn record frontmatter is not a mapping")
    return fm, found[1]


def parse_sections(body: str) -> tuple[str, str, str]:
    """Input, compact and output of a record body, exactly as rendered."""
    start = body.find(_INPUT_HEAD)
    if start < 0 or body[:start].strip():
        raise InvalidDocument("turn record: missing section '## Input'")
    inp, pos = _decode_section(body, start + len(_INPUT_HEAD), _COMPACT_SEP)
    if not body.startswith(_COMPACT_SEP, pos):
        raise InvalidDocument("turn record: missing section '## Compact'")
    pos += len(_COMPACT_SEP)
    end = body.find(_OUTPUT_SEP, pos)
    if end < 0:
        raise InvalidDocument("turn record: missing section '## Output'")
    compact = body[pos:end]
    out, _ = _decode_section(body, end + len(_OUTPUT_SEP), None)
    return inp, compact, out


def _str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if v is not None)
    if isinstance(value, str) and value:
        return (value,)
    return ()


_KNOWN = {
    "episode_id",
    "memory_kind",
    "type",
    "thread",
    "user",
    "channel",
    "parents",
    "keywords",
    "created",
}


def parse_turn(text: str) -> TurnRecord:
    """A :class:`TurnRecord` from a record's markdown text."""
    fm, body = split_frontmatter(text)
    if str(fm.get("type", "")).strip().lower() != TURN_TYPE:
        raise InvalidDocument("not a turn record (type is not 'turn')")
    inp, compact, out = parse_sections(body)
    return TurnRecord(
        id=str(fm.get("episode_id", "")),
        thread=str(fm.get("thread") or ""),
        user=str(fm.get("user") or ""),
        channel=str(fm.get("channel") or ""),
        parents=_str_list(fm.get("parents")),
        keywords=_str_list(fm.get("keywords")),
        created=str(fm.get("created") or ""),
        input=inp,
        compact=compact,
        output=out,
        extra={k: v for k, v in fm.items() if k not in _KNOWN},
    )


# -- the Compact section ----------------------------------------------------------

NO_TOOLS_NOTE = "- No tool calls."


def says_nothing_new(compact: str) -> bool:
    """Whether a compact section is only the default compactor's note for a turn without
    tool calls: ``- No tool calls.``, then perhaps ``- Result: `` repeating the output.

    Such a section tells a reader nothing the input and output do not: the index and the
    context pack leave it out (the file keeps it).
    """
    lines = compact.split("\n")
    if lines[0] != NO_TOOLS_NOTE or len(lines) > 2:
        return False
    return len(lines) == 1 or lines[1].startswith("- Result: ")


# -- a turn body as the index reads it ----------------------------------------------

SECTION_NAMES = ("input", "compact", "output")

# The Compact section of a turn without tool calls, from where it starts to where Output does.
_NO_TOOLS_AT = _COMPACT_SEP + NO_TOOLS_NOTE


def sections(body: str) -> dict[str, str]:
    """The Input, Compact and Output sections of a turn body, by lower-case name (stripped).

    Lenient where :func:`parse_sections` is exact: a record edited by hand, or the index's
    copy of a body without its Compact note (:func:`without_no_tools_note`), still gives
    the sections it has.
    """
    parts: dict[str, str] = {}
    for section in links.sections(body):
        name = section.heading.strip().lower()
        if section.level == 2 and name in SECTION_NAMES and name not in parts:
            text = section.text.split("\n", 1)[1] if "\n" in section.text else ""
            parts[name] = text.strip()
    return parts


def without_no_tools_note(body: str) -> str:
    """A turn body less its Compact section when that only says there were no tool calls.

    Such a section (:func:`says_nothing_new`) would make every turn match "tool" and
    "calls", count the output's words twice and fill snippets with the repeat: the file
    keeps it, the full-text index leaves it out (migration 0700 does the same to older
    indexes).
    """
    start = body.find(_NO_TOOLS_AT)
    end = body.find(_OUTPUT_SEP)
    if start < 0 or end <= start or not says_nothing_new(body[start + len(_COMPACT_SEP) : end]):
        return body
    return body[:start] + body[end:]
