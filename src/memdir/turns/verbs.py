"""Turn records: one markdown file per agent turn, linked to its parents (a DAG).

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

The :class:`TurnVerbs` mixin adds the turn verbs to :class:`memdir.Memory`.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from ..doc import frontmatter, paths
from ..doc.ids import id_time_ms, new_id
from ..doc.text import bad_char, unicode_text
from ..errors import InvalidDocument, InvalidInput, NotFound

if TYPE_CHECKING:
    from ..files.store import Store
    from ..index import Index
    from ..index.search import Filters, Hit
    from ..settings import Settings
    from .pack import ContextPack

TURNS_DIR = "episodes/turns"
TURN_TYPE = "turn"
WORKLOG_SUFFIX = ".worklog.jsonl"
MAX_NAME_CHARS = 200
MAX_KEYWORDS = 50
MAX_PARENTS = 100

_ID_RE = re.compile(r"^[0-9abcdefghjkmnpqrstvwxyz]{26}$")
_HEADING_RE = re.compile(r"^ {0,3}#{1,2}(?:[ \t]|$)", re.MULTILINE)
_BACKTICKS_RE = re.compile(r"`+")
_INPUT_HEAD = "## Input\n\n"
_COMPACT_SEP = "\n\n## Compact\n\n"
_OUTPUT_SEP = "\n\n## Output\n\n"


# -- the record ----------------------------------------------------------------


@dataclass(frozen=True)
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
MAX_WALK_DEPTH = 1000
MAX_WALK_LIMIT = 100_000
MAX_THREAD_LAST = 10_000


def _in_range(name: str, value: object, top: int) -> None:
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
    """Parent ids: well-formed, deduplicated in order, never the record's own id."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [v for v in re.split(r"[,\s]+", values) if v]
    if not isinstance(values, Iterable):
        raise InvalidInput("parents must be a list of turn ids")
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
        if ident not in out:
            out.append(ident)
    if len(out) > MAX_PARENTS:
        raise InvalidInput(f"at most {MAX_PARENTS} parents")
    return tuple(out)


def _check_text(kind: str, value: object) -> str:
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
    if not text.startswith("---\n"):
        raise InvalidDocument("turn record has no frontmatter")
    end = text.find("\n---\n", 3)
    if end < 0:
        raise InvalidDocument("turn record frontmatter is not closed")
    # The store's own reader: the same YAML rules (aliases refused) as every document.
    try:
        fm = frontmatter.load_strict(text[: end + 5])
    except InvalidDocument as exc:
        raise InvalidDocument(f"turn record frontmatter: {exc.message}") from None
    if not isinstance(fm, dict):
        raise InvalidDocument("turn record frontmatter is not a mapping")
    return fm, text[end + 5 :]


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


# -- the service mixin ---------------------------------------------------------


class DagNode(NamedTuple):
    """A turn reached by a DAG walk, ``depth`` steps away (a named tuple: a walk can make a
    thousand of them, and a tuple is made three times faster than a frozen dataclass)."""

    id: str
    path: str
    depth: int
    thread: str
    user: str
    created: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "path": self.path,
            "depth": self.depth,
            "thread": self.thread,
            "user": self.user,
            "created": self.created,
        }


class TurnVerbs:
    """Turn verbs of :class:`memdir.Memory` (uses ``store``, ``index``, ``settings``, ``sync``)."""

    store: Store
    index: Index
    settings: Settings

    if TYPE_CHECKING:  # provided by StoreVerbs in Memory

        def sync(self) -> Any: ...

        def _embed_turn(self) -> None: ...

    # -- writing -------------------------------------------------------------

    def record_turn(
        self,
        *,
        thread: str,
        input: str = "",
        output: str = "",
        worklog: Sequence[Mapping[str, Any]] | bytes | str | None = None,
        user: str = "",
        channel: str = "",
        parents: Sequence[str] = (),
        keywords: Sequence[str] | str = (),
        provenance: str | None = None,
        actor: str | None = None,
        id: str | None = None,
    ) -> TurnRecord:
        """Store a turn record and its raw work log; compact the work log.

        Every argument is validated before anything is written: parents must be
        existing turns, input and output cannot both be empty, thread and user
        ids cannot hold path separators or control characters.
        """
        from ..doc import provenance as prov
        from .compaction import compact_worklog

        thread = validate_name("thread", thread, required=True)
        user = validate_name("user", user, required=False)
        channel = validate_name("channel", channel, required=False)
        input = _check_text("input", input)
        output = _check_text("output", output)
        if not input.strip() and not output.strip():
            raise InvalidInput("a turn needs an input or an output (both are empty)")
        if id is not None and not is_turn_id(id):
            raise InvalidInput(not_a_turn_id(id))
        ident = id or new_id()
        parent_ids = validate_parent_ids(parents, ident)
        kws = validate_keywords(keywords)
        prov_value = prov.parse(provenance) if provenance is not None else None
        raw_log, entries = worklog_from(worklog)
        self._check_parents(parent_ids)
        rel = turn_path(ident)
        if (self.store.root / rel).exists():
            from ..errors import Conflict

            raise Conflict(f"turn {ident} already exists")
        compaction = compact_worklog(entries, input=input, output=output, settings=self.settings)
        extra: dict[str, Any] = {"compactor": compaction.compactor}
        if compaction.error:
            extra["compact_error"] = compaction.error
        if raw_log:
            extra["worklog"] = ident + WORKLOG_SUFFIX
            extra["tool_calls"] = len(entries)
        record = TurnRecord(
            id=ident,
            thread=thread,
            user=user,
            channel=channel,
            parents=parent_ids,
            keywords=kws,
            created=created_of(ident),
            input=input,
            compact=compaction.text,
            output=output,
            extra=extra,
        )
        message = f"turn {ident} ({thread})"
        files: list[tuple[str, str | bytes]] = [(rel, render_turn(record))]
        if raw_log:
            files.insert(0, (worklog_path(ident), raw_log))
        self.store.write_files(
            files,
            actor=actor,
            message=message,
            provenance_value=prov_value,
            after_rename=lambda _written: self.index.sync_paths([rel]),
        )
        self._embed_turn()
        return record

    def _check_parents(self, parent_ids: Sequence[str]) -> None:
        """Every parent must be an existing turn: one index look-up, files only as a fallback."""
        if not parent_ids:
            return
        marks = ",".join("?" * len(parent_ids))
        known: dict[str, tuple[str, str]] = {}
        for row in self.index.conn.execute(
            f"SELECT episode_id, path, type FROM docs WHERE episode_id IN ({marks})",
            list(parent_ids),
        ):
            if row["type"] == TURN_TYPE or row["episode_id"] not in known:
                known[row["episode_id"]] = (row["path"], row["type"] or "")
        for pid in parent_ids:
            path, kind = known.get(pid, ("", ""))
            if kind == TURN_TYPE:
                continue
            # Not in the index (yet): another process may have just written it.
            if is_turn_id(pid) and (self.store.root / turn_path(pid)).is_file():
                try:
                    fm, _ = split_frontmatter(self.store.read_text(turn_path(pid)))
                except InvalidDocument:
                    fm = {}
                if str(fm.get("type", "")).lower() == TURN_TYPE and fm.get("episode_id") == pid:
                    continue
                raise InvalidInput(f"parent {pid} is not a turn ({turn_path(pid)})")
            if path:
                raise InvalidInput(f"parent {pid} is not a turn: {path} has type {kind!r}")
            raise InvalidInput(f"unknown parent turn: {pid}")

    # -- reading -------------------------------------------------------------

    def turn_show(self, turn_id: str) -> TurnRecord:
        """The record of a turn."""
        rel = self._turn_file(turn_id)
        return parse_turn(self.store.read_text(rel))

    def turn_worklog(self, turn_id: str) -> bytes:
        """The raw work log of a turn, byte for byte as recorded (b"" when it had none)."""
        self._turn_file(turn_id)
        side = worklog_path(turn_id)
        if not self.store.exists(side):
            return b""
        if self.store.resolve(side)[0] != side:
            raise NotFound(f"the work log of turn {turn_id} is a symlink to another file")
        return self.store.read_bytes(side)

    def _turn_file(self, turn_id: str) -> str:
        """The record's path, when a file is there in its own name.

        A caller is allowed a turn by its path (a token's prefix); a symlink there would
        show another file, which may lie outside that prefix, so it is no turn record.
        """
        rel = turn_path(turn_id)
        if not self.store.exists(rel):
            raise NotFound(f"no such turn: {turn_id}")
        if self.store.resolve(rel)[0] != rel:
            raise NotFound(f"no such turn: {turn_id} (its path is a symlink to another file)")
        return rel

    def _walk(self, start: str, depth: int, limit: int, up: bool) -> list[DagNode]:
        """The turns ``depth`` steps around ``start``, nearest first; never reads a file.

        One recursive query over (turn, depth) pairs first; on a DAG so dense that the
        pairs pass a cap (``limit`` x 20), the breadth-first walk with a visited set,
        which is bounded by ``limit``, answers instead.
        """
        if not is_turn_id(start):
            raise InvalidInput(not_a_turn_id(start))
        if depth < 0 or limit < 1:
            raise InvalidInput("depth must be >= 0 and limit >= 1")
        conn = self.index.conn
        if up:
            step = "SELECT e.parent, w.depth + 1 FROM walk w CROSS JOIN turn_edges e "
            step += "WHERE e.child = w.eid AND w.depth < ?"
        else:
            step = "SELECT e.child, w.depth + 1 FROM walk w CROSS JOIN turn_edges e "
            step += "WHERE e.parent = w.eid AND w.depth < ?"
        cap = limit * 20
        # A step is one seek in turn_edges (by child upwards, by parent downwards); the walk
        # dedups (turn, depth) pairs; each turn found then takes its smallest depth and one
        # seek in turn_nodes for its columns. A dangling parent id has no turn_nodes row.
        cur = conn.cursor()
        cur.row_factory = None  # plain tuples: a walk can return a thousand rows
        rows = cur.execute(
            f"WITH RECURSIVE walk(eid, depth) AS (SELECT ?, 0 UNION {step} LIMIT ?), "
            "best(eid, depth, n) AS (SELECT eid, min(depth), count(*) FROM walk GROUP BY eid) "
            "SELECT b.eid, b.depth, b.n, n.path, n.thread, n.user, n.created, n.hidden "
            "FROM best b CROSS JOIN turn_nodes n ON n.eid = b.eid ORDER BY b.depth, b.eid DESC",
            (start, depth, cap),
        ).fetchall()
        if not rows or rows[0][0] != start:
            raise NotFound(f"no such turn: {start}")
        if sum({r[0]: r[2] for r in rows}.values()) >= cap:
            return self._walk_bfs(start, depth, limit, up)
        nodes: list[DagNode] = []
        seen = {start}
        for eid, level, _n, path, thread, user, created, hidden in rows:
            if hidden or eid in seen:
                continue  # a forgotten turn, or a second file with the same id
            seen.add(eid)
            nodes.append(DagNode(eid, path, level, thread or "", user or "", created or ""))
            if len(nodes) == limit:
                break
        return nodes

    def _walk_bfs(self, start: str, depth: int, limit: int, up: bool) -> list[DagNode]:
        """Breadth-first over the index: one query per level, a visited set, no file read.

        A cycle made by hand cannot loop (visited set); the work is bounded by ``depth``
        levels and stops once ``limit`` turns are found.
        """
        if not is_turn_id(start):
            raise InvalidInput(not_a_turn_id(start))
        if depth < 0 or limit < 1:
            raise InvalidInput("depth must be >= 0 and limit >= 1")
        conn = self.index.conn
        cols = "n.eid AS episode_id, n.path, n.thread, n.user, n.created, n.hidden"
        if up:
            sql = (
                f"SELECT {cols}, e.parent AS next FROM turn_nodes n LEFT JOIN turn_edges e "
                "ON e.child = n.eid AND e.doc_id = n.doc_id WHERE n.eid IN ({})"
            )
        else:
            sql = (
                f"SELECT {cols}, n.eid AS next FROM turn_edges e CROSS JOIN turn_nodes n "
                "WHERE e.parent IN ({}) AND n.eid = e.child AND n.doc_id = e.doc_id"
            )
        info: dict[str, DagNode] = {}
        hidden: set[str] = set()
        seen = {start}
        found: list[tuple[str, int]] = []

        def query(ids: list[str]) -> list[sqlite3.Row]:
            rows: list[sqlite3.Row] = []
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                rows += conn.execute(sql.format(",".join("?" * len(chunk))), chunk).fetchall()
            return rows

        def note(row: sqlite3.Row, level: int) -> None:
            ident = row["episode_id"]
            if ident not in info:
                info[ident] = DagNode(
                    ident, row["path"], level, row["thread"] or "", row["user"] or "",
                    row["created"] or "",
                )  # fmt: skip
                if row["hidden"]:
                    hidden.add(ident)

        if up:
            rows = query([start])
            if not rows:
                raise NotFound(f"no such turn: {start}")
        else:
            exists = conn.execute(
                "SELECT 1 FROM turn_nodes WHERE eid = ? LIMIT 1", (start,)
            ).fetchone()
            if exists is None:
                raise NotFound(f"no such turn: {start}")
            rows = []
        frontier = [start]
        level = 0
        while frontier and level < depth and len(found) < limit + len(hidden):
            level += 1
            if not up:
                rows = query(frontier)
            nxt: list[str] = []
            for row in rows:
                ident = row["next"]
                if ident and ident not in seen:
                    seen.add(ident)
                    nxt.append(ident)
                if not up:
                    note(row, level)
            nxt.sort(reverse=True)
            found.extend((n, level) for n in nxt)
            frontier = nxt
            if up and frontier:
                rows = query(frontier)
                for row in rows:
                    note(row, level)
        nodes = []
        for ident, level in found:
            node = info.get(ident)
            if node is None or ident in hidden:
                continue  # a dangling parent id, or a forgotten turn
            nodes.append(DagNode(node.id, node.path, level, node.thread, node.user, node.created))
        return nodes[:limit]

    def ancestors(self, turn_id: str, depth: int = 10, limit: int = 1000) -> list[DagNode]:
        """Turns this turn descends from, nearest first (breadth-first over ``parents``)."""
        _in_range("depth", depth, MAX_WALK_DEPTH)
        _in_range("limit", limit, MAX_WALK_LIMIT)
        self.sync()
        return self._own_files(self._walk(turn_id, depth, limit, up=True))

    def descendants(self, turn_id: str, depth: int = 10, limit: int = 1000) -> list[DagNode]:
        """Turns that name this turn as a parent, directly or through others, nearest first."""
        _in_range("depth", depth, MAX_WALK_DEPTH)
        _in_range("limit", limit, MAX_WALK_LIMIT)
        self.sync()
        return self._own_files(self._walk(turn_id, depth, limit, up=False))

    def thread(self, thread: str, last: int = 20) -> list[DagNode]:
        """The latest ``last`` turns of a thread, newest first."""
        thread = validate_name("thread", thread, required=True)
        _in_range("last", last, MAX_THREAD_LAST)
        self.sync()
        rows = self.index.conn.execute(
            "SELECT episode_id, path, thread, user, created FROM docs "
            "WHERE thread = ? AND +type = 'turn' AND hidden = 0 "
            "ORDER BY created DESC, episode_id DESC LIMIT ?",
            (thread, last),
        ).fetchall()
        return self._own_files(
            [
                DagNode(
                    r["episode_id"],
                    r["path"],
                    0,
                    r["thread"] or "",
                    r["user"] or "",
                    r["created"] or "",
                )
                for r in rows
            ]
        )

    def _own_files(self, nodes: list[DagNode]) -> list[DagNode]:
        """``nodes`` without the turns whose path is a symlink: as for ``turn_show``, what
        a caller is allowed by path must not show another file's thread, user or time."""
        linked = paths.through_symlinks(self.store.root, [n.path for n in nodes])
        return [n for n in nodes if n.path not in linked] if linked else nodes

    def sync_worklogs(self) -> int:
        """Bring the work-log full-text table in step with the turn rows; returns rows added.

        Runs only on demand (``search_worklogs``): work logs are never searched by default.
        """
        conn = self.index.conn
        todo = conn.execute(
            "SELECT d.id, d.path FROM docs d LEFT JOIN worklogs w "
            "ON w.doc_id = d.id AND w.path = d.path WHERE d.type = 'turn' AND w.doc_id IS NULL"
        ).fetchall()
        stale = conn.execute(
            "SELECT w.doc_id FROM worklogs w LEFT JOIN docs d "
            "ON d.id = w.doc_id AND d.path = w.path WHERE d.id IS NULL"
        ).fetchall()
        if not todo and not stale:
            return 0
        with self.index.transaction() as tx:
            for (doc_id,) in stale:
                tx.execute("DELETE FROM worklog_fts WHERE rowid = ?", (doc_id,))
                tx.execute("DELETE FROM worklogs WHERE doc_id = ?", (doc_id,))
            for doc_id, path in todo:
                side = self.store.root / (path[: -len(".md")] + WORKLOG_SUFFIX)
                try:
                    data = side.read_bytes()
                    st = side.stat()
                    size, mtime = st.st_size, st.st_mtime_ns
                except OSError:
                    data, size, mtime = b"", 0, 0
                tx.execute("DELETE FROM worklog_fts WHERE rowid = ?", (doc_id,))
                tx.execute(
                    "INSERT INTO worklog_fts(rowid, body) VALUES (?, ?)",
                    (doc_id, data.decode("utf-8", errors="replace")),
                )
                tx.execute(
                    "INSERT OR REPLACE INTO worklogs(doc_id, path, size, mtime_ns) "
                    "VALUES (?, ?, ?, ?)",
                    (doc_id, path, size, mtime),
                )
        return len(todo)

    def search_worklogs(
        self, query: str, *, limit: int | None = None, filters: Filters | None = None
    ) -> list[Hit]:
        """BM25 over the raw work logs of turns (mode two, on demand); pointers to sidecars.

        ``filters`` (as for search: path prefix, kind, type, where, include_superseded)
        apply to the turn each work log belongs to.
        """
        from ..index.search import Filters, Hit, fts_query

        if limit is None:
            limit = self.settings.search.default_limit  # as search
        if limit < 1 or limit > 1000:
            raise InvalidInput(f"limit must be between 1 and 1000, got {limit}")
        match = fts_query(query)
        self.sync()
        self.sync_worklogs()
        where, params = (filters or Filters()).sql("d")
        rows = self.index.conn.execute(
            "SELECT d.path, d.episode_id, snippet(worklog_fts, 0, '[', ']', ' … ', 16) AS snip, "
            "bm25(worklog_fts) AS score FROM worklog_fts JOIN docs d ON d.id = worklog_fts.rowid "
            f"WHERE worklog_fts MATCH ? AND d.type = 'turn'{where} "
            "ORDER BY score, d.episode_id LIMIT ?",
            (match, *params, limit),
        ).fetchall()
        return [
            Hit(
                path=row["path"][: -len(".md")] + WORKLOG_SUFFIX,
                title=f"work log of turn {row['episode_id']}",
                snippet=" ".join(str(row["snip"] or "").split()),
                score=round(-float(row["score"]), 4),
                type="worklog",
                memory_kind="episodic",
                why={"bm25_rank": rank, "source": "worklog", "turn": row["path"]},
            )
            for rank, row in enumerate(rows, start=1)
        ]

    def context(
        self,
        thread: str,
        user: str = "",
        keywords: Sequence[str] | str = (),
        budget: int | None = None,
    ) -> ContextPack:
        """Mode one: the context pack for the start of a turn (see :mod:`memdir.turns.pack`)."""
        from .pack import build_pack

        self.sync()
        return build_pack(self, thread=thread, user=user, keywords=keywords, budget=budget)
