"""BM25 search over the FTS5 table, with filters; results are pointers, never bodies."""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from ..doc.lazyregex import LazyRegex
from ..errors import InvalidInput, InvalidQuery
from ..records import asdict, field, recordclass
from . import postings

_WORD = LazyRegex(r"\w+", re.UNICODE)
# Words so common that they only slow an OR query down; dropped when others remain.
STOPWORDS = frozenset(
    """a an and are as at be but by did do does for from had has have he her him his how i if
    in into is it its me my of on or our she so than that the their them then there these they
    this to was we were what when where which who whom why will with you your""".split()
)

_HEADING_MARK = LazyRegex(r"(?:^|(?<=\s))#{1,6}\s+")
# A turn record's section headings, as a snippet of its body shows them (matched words
# in brackets): read as "input · work: ... → output".
_TURN_SECTION = LazyRegex(r"(?:^|(?<=\s))##\s+\[?(Input|Compact|Output)\]?(?=\s|$)")
_TURN_LABELS = {"input": " ", "compact": " · work: ", "output": " → "}
_POINTER_COLUMNS = "d.thread, d.user, d.created, d.episode_id"


def present(title: str, snippet: str, row: Any) -> tuple[str, str]:
    """The title and snippet a pointer shows (a turn gets a readable title and snippet).

    ``row`` carries ``type``, ``thread``, ``user``, ``created``, ``episode_id`` and ``path``.
    A turn record's title defaults to its id, which tells a reader nothing: it shows as
    ``thread · user · YYYY-MM-DD HH:MM`` instead, and its snippet reads ``input →
    output``. Heading marks (``## ``) leave every snippet.
    """
    text = " ".join((snippet or "").split())
    if str(row["type"] or "").lower() == "turn":
        ident = str(row["episode_id"] or "")
        stem = str(row["path"]).rsplit("/", 1)[-1].removesuffix(".md")
        if not title or title in (ident, stem):
            created = str(row["created"] or "")[:16].replace("T", " ")
            parts = [str(row["thread"] or ""), str(row["user"] or ""), created]
            title = " · ".join(p for p in parts if p) or title
        text = _TURN_SECTION.sub(lambda m: _TURN_LABELS[m.group(1).lower()], text)
    return title, " ".join(_HEADING_MARK.sub("", text).split())


def words(text: str) -> list[str]:
    """The searchable words of any user string (never raises)."""
    return [w.lower() for w in _WORD.findall(text or "")]


def query_words(text: str, *, keep_stopwords: bool = False) -> list[str]:
    """The distinct words an OR query is made of (stopwords dropped when others remain)."""
    found = list(dict.fromkeys(words(text)))
    if not found:
        raise InvalidQuery("the query has no searchable words")
    if not keep_stopwords:
        content = [w for w in found if w not in STOPWORDS]
        found = content or found
    return found


def fts_query(text: str, *, keep_stopwords: bool = False) -> str:
    """Turn any user string into a safe FTS5 query: quoted words joined by OR.

    Quotes, colons, ``AND``, ``*``, parentheses and hyphens are treated as plain
    text, so the result never raises an FTS5 syntax error.
    """
    found = query_words(text, keep_stopwords=keep_stopwords)
    return " OR ".join('"' + w.replace('"', "") + '"' for w in found)


@recordclass
class Hit:
    path: str
    title: str
    snippet: str
    score: float
    type: str | None = None
    memory_kind: str | None = None
    why: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@recordclass(frozen=True)
class Filters:
    path_prefix: str | None = None
    kind: str | None = None
    type: str | None = None
    where: tuple[tuple[str, Any], ...] = ()
    include_superseded: bool = False
    # Paths left out, a folder ending in "/" with all below it: what leads out of the path
    # prefix through a symlink (memdir.doc.paths.links_out).
    exclude: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for key, value in self.where:
            if value is not None and not isinstance(value, str | int | float):
                raise InvalidInput(
                    f"the where filter on {key!r} needs one value (text, number, boolean or "
                    f"null), got {type(value).__name__} {value!r}; a list field matches any "
                    "of its items, one filter per value"
                )

    def sql(self, alias: str = "d") -> tuple[str, list[Any]]:
        """A SQL condition (starting with AND) and its parameters."""
        parts = [f"{alias}.zone = 0"]
        params: list[Any] = []
        if not self.include_superseded:
            parts.append(f"{alias}.hidden = 0")
        if self.path_prefix:
            prefix = self.path_prefix.lstrip("/")
            parts.append(f"substr({alias}.path, 1, ?) = ?")
            params += [len(prefix), prefix]
        if self.exclude:
            parts.append(
                f"NOT EXISTS (SELECT 1 FROM json_each(?) x WHERE x.value = {alias}.path "
                f"OR (substr(x.value, -1) = '/' AND substr({alias}.path, 1, length(x.value)) "
                "= x.value))"
            )
            params.append(json.dumps(list(self.exclude)))
        if self.kind:
            parts.append(f"lower({alias}.memory_kind) = lower(?)")
            params.append(self.kind)
        if self.type:
            parts.append(f"lower({alias}.type) = lower(?)")
            params.append(self.type)
        for key, value in self.where:
            # the label as the index's JSON spells the key: a backslash is escaped there
            path = '$."' + key.replace('"', "").replace("\\", "\\\\") + '"'
            # A scalar (key NULL) or a list's scalar items (integer keys) match; a map's
            # members (text keys) and nested lists or maps (their JSON text) never do.
            parts.append(
                f"EXISTS (SELECT 1 FROM json_each({alias}.fm, ?) WHERE value IS ? "
                "AND typeof(key) != 'text' AND type NOT IN ('array', 'object'))"
            )
            params += [path, value]
        return " AND " + " AND ".join(parts), params


def bm25(
    conn: sqlite3.Connection,
    query: str,
    filters: Filters,
    limit: int,
    *,
    offset: int = 0,
    tuning: postings.Tuning = postings.DEFAULT,
) -> list[Hit]:
    """Rank documents with BM25 (title weighted 3x the body).

    Queries whose words match many documents are ranked from cached postings
    (:mod:`memdir.index.postings`, same scores); the others by FTS5 directly.
    """
    match = fts_query(query)
    condition, params = filters.sql()
    ranked = postings.rank(conn, query_words(query), condition, params, offset + limit, tuning)
    if ranked is not None:
        return _pointers(conn, match, ranked[offset:], offset)
    sql = (
        f"SELECT d.path, d.title, d.type, d.memory_kind, {_POINTER_COLUMNS}, "
        "snippet(docs_fts, 1, '[', ']', ' … ', 16) AS snip, "
        "bm25(docs_fts, 3.0, 1.0) AS score "
        "FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid "
        f"WHERE docs_fts MATCH ?{condition} ORDER BY score LIMIT ? OFFSET ?"
    )
    rows = conn.execute(sql, (match, *params, limit, offset)).fetchall()
    return [
        _hit(row, row["snip"], float(row["score"]), rank)
        for rank, row in enumerate(rows, start=offset + 1)
    ]


def _hit(row: sqlite3.Row, snippet: Any, score: float, rank: int) -> Hit:
    title, text = present(row["title"], str(snippet or ""), row)
    return Hit(
        path=row["path"],
        title=title,
        snippet=text,
        score=round(-score, 4),
        type=row["type"],
        memory_kind=row["memory_kind"],
        why={"bm25_rank": rank},
    )


def _pointers(
    conn: sqlite3.Connection, match: str, ranked: list[tuple[sqlite3.Row, float]], offset: int
) -> list[Hit]:
    """Hits for rows ranked outside FTS5, with FTS5's snippets for those rows only."""
    if not ranked:
        return []
    ids = ",".join(str(int(row["id"])) for row, _ in ranked)
    snippets = dict(
        conn.execute(
            "SELECT rowid, snippet(docs_fts, 1, '[', ']', ' … ', 16) FROM docs_fts "
            f"WHERE docs_fts MATCH ? AND rowid IN ({ids})",
            (match,),
        ).fetchall()
    )
    return [
        _hit(row, snippets.get(row["id"]), score, rank)
        for rank, (row, score) in enumerate(ranked, start=offset + 1)
    ]


def hits_for_paths(
    conn: sqlite3.Connection, query: str, ranked: list[tuple[str, float]], offset: int = 0
) -> list[Hit]:
    """BM25 hits for ``(path, score)`` ranked elsewhere (the Postgres engine), as :func:`bm25`
    shows them: FTS5's snippets, the same ``why``. Paths this index does not hold are left out.
    """
    if not ranked:
        return []
    rows: dict[str, sqlite3.Row] = {}
    paths = [p for p, _ in ranked]
    for lo in range(0, len(paths), 500):
        part = paths[lo : lo + 500]
        marks = ",".join("?" * len(part))
        for row in conn.execute(
            f"SELECT d.id, d.path, d.title, d.type, d.memory_kind, {_POINTER_COLUMNS} "
            f"FROM docs d WHERE d.path IN ({marks})",
            part,
        ):
            rows[row["path"]] = row
    found = [(rows[p], -score) for p, score in ranked if p in rows]
    return _pointers(conn, fts_query(query), found, offset)
