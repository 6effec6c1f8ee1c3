"""Search hits from document ids: each hit's path, title, type and the snippet that shows
why it matched (the query's words in the document, or the chunk its vector matched)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..index import lookups
from ..index.search import Hit, fts_query

if TYPE_CHECKING:
    from ..vectors.index import VectorHit


def hits_for(
    conn: sqlite3.Connection,
    doc_ids: list[int],
    query: str | None = None,
    chunks: Mapping[int, VectorHit] | None = None,
) -> dict[int, Hit]:
    """Pointers (path, title, snippet) for document ids.

    A turn's snippet reads ``input → output``. Any other document's snippet is the
    start of its body, unless that does not show why it was found: then the part
    that matches the query's words (FTS5's window, as BM25 search shows it, without
    the brackets) or, for a hit found by meaning alone, the start of its best chunk.
    """
    from ..doc.turnrecord import sections as turn_parts
    from ..index.passages import passage
    from ..index.search import present

    if not doc_ids:
        return {}
    rows = lookups.pointer_rows(conn, doc_ids)
    # Turns show `input → output`: only other documents need their matching window.
    others = [int(r["id"]) for r in rows if str(r["type"] or "").lower() != "turn"]
    windows = match_windows(conn, query, others) if query and others else {}
    out = {}
    for row in rows:
        doc_id = int(row["id"])
        body = str(row["body"] or "")
        parts = turn_parts(body) if str(row["type"] or "").lower() == "turn" else {}
        if parts.get("input") or parts.get("output"):
            said = [parts[k] for k in ("input", "output") if parts.get(k)]
            text = " → ".join(" ".join(p.split()) for p in said)
        elif doc_id in windows:
            text = windows[doc_id]
        elif chunks and doc_id in chunks and chunks[doc_id].chunk_no > 0:
            text = chunk_text(conn, doc_id, chunks[doc_id]) or passage("", body)
        else:
            text = " ".join(passage("", body).split())
        title, text = present(str(row["title"]), text, row)
        out[doc_id] = Hit(
            path=str(row["path"]),
            title=title,
            snippet=_cut(text, SNIPPET_CHARS),
            score=0.0,
            type=row["type"],
            memory_kind=row["memory_kind"],
        )
    return out


def match_windows(conn: sqlite3.Connection, query: str, doc_ids: list[int]) -> dict[int, str]:
    """FTS5's window of each document's body that matches the query's words.

    Only documents whose match lies past the start of the body are listed (the
    window then begins with ``…``): for the others, the start already shows it.
    """
    out = {}
    for doc_id, window in lookups.match_windows(conn, fts_query(query), doc_ids):
        text = " ".join(str(window or "").split())
        if text.startswith(lookups.ELLIPSIS.strip()):
            out[int(doc_id)] = text
    return out


def chunk_text(conn: sqlite3.Connection, doc_id: int, chunk: VectorHit) -> str:
    """The words of a document's chunk (a vector hit's best chunk), from its start."""
    from ..index.passages import document_texts

    found = document_texts(conn, doc_id)
    if found is None:
        return ""
    text = " ".join(found[0][chunk.start : chunk.end].split())
    return f"{lookups.ELLIPSIS.strip()} {text}" if text else ""


# A pointer's snippet: at most this many characters, cut at a space.
SNIPPET_CHARS = 160


def _cut(text: str, size: int) -> str:
    """``text``, or its start cut at a word before ``size`` characters, ending with ``…``."""
    if len(text) <= size:
        return text
    return text[: size - 3].rsplit(" ", 1)[0] + " …"
