"""BM25 search over the FTS5 table, with filters; results are pointers, never bodies."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import InvalidQuery

_WORD = re.compile(r"\w+", re.UNICODE)
# Words so common that they only slow an OR query down; dropped when others remain.
STOPWORDS = frozenset(
    """a an and are as at be but by did do does for from had has have he her him his how i if
    in into is it its me my of on or our she so than that the their them then there these they
    this to was we were what when where which who whom why will with you your""".split()
)


def words(text: str) -> list[str]:
    """The searchable words of any user string (never raises)."""
    return [w.lower() for w in _WORD.findall(text or "")]


def fts_query(text: str, *, keep_stopwords: bool = False) -> str:
    """Turn any user string into a safe FTS5 query: quoted words joined by OR.

    Quotes, colons, ``AND``, ``*``, parentheses and hyphens are treated as plain
    text, so the result never raises an FTS5 syntax error.
    """
    found = list(dict.fromkeys(words(text)))
    if not found:
        raise InvalidQuery("the query has no searchable words")
    if not keep_stopwords:
        content = [w for w in found if w not in STOPWORDS]
        found = content or found
    return " OR ".join('"' + w.replace('"', "") + '"' for w in found)


@dataclass
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


@dataclass(frozen=True)
class Filters:
    path_prefix: str | None = None
    kind: str | None = None
    type: str | None = None
    where: tuple[tuple[str, Any], ...] = ()
    include_superseded: bool = False

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
        if self.kind:
            parts.append(f"lower({alias}.memory_kind) = lower(?)")
            params.append(self.kind)
        if self.type:
            parts.append(f"lower({alias}.type) = lower(?)")
            params.append(self.type)
        for key, value in self.where:
            path = '$."' + key.replace('"', "") + '"'
            parts.append(f"EXISTS (SELECT 1 FROM json_each({alias}.fm, ?) WHERE value IS ?)")
            params += [path, value]
        return " AND " + " AND ".join(parts), params


def bm25(
    conn: sqlite3.Connection, query: str, filters: Filters, limit: int, *, offset: int = 0
) -> list[Hit]:
    """Rank documents with BM25 (title weighted 3x the body)."""
    match = fts_query(query)
    condition, params = filters.sql()
    sql = (
        "SELECT d.path, d.title, d.type, d.memory_kind, "
        "snippet(docs_fts, 1, '[', ']', ' … ', 16) AS snip, "
        "bm25(docs_fts, 3.0, 1.0) AS score "
        "FROM docs_fts JOIN docs d ON d.id = docs_fts.rowid "
        f"WHERE docs_fts MATCH ?{condition} ORDER BY score LIMIT ? OFFSET ?"
    )
    rows = conn.execute(sql, (match, *params, limit, offset)).fetchall()
    return [
        Hit(
            path=row["path"],
            title=row["title"],
            snippet=" ".join(str(row["snip"] or "").split()),
            score=round(-float(row["score"]), 4),
            type=row["type"],
            memory_kind=row["memory_kind"],
            why={"bm25_rank": rank},
        )
        for rank, row in enumerate(rows, start=offset + 1)
    ]
