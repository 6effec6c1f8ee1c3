"""Mode one: the context pack injected at the start of a turn.

One pack, assembled from bounded index look-ups only (every query has a LIMIT
and runs on an index), so its cost does not grow with the store:

1. ``SNAPSHOT.md`` when it exists (required: a budget too small for it is an error);
2. the routers (``index.md`` files), top first;
3. the latest turns of the thread;
4. recent turns of the same user in other threads, newest first;
5. turns matching the keywords: the 100 most recent matches, ranked with BM25 term
   weights (IDF over those 100, presence only), then newest first;
6. the recent DAG ancestors of the thread's latest turn: the nearest ones with
   their compact section, older ones as input and output only.

Every item carries the reason it is there; an item met again under another
reason is not repeated (the reason is added to ``also``). Items are added in
that order while they fit; the rendered pack's token count (see
:mod:`memdir.doc.tokencount`) never exceeds the budget, and the same store gives the
same pack. What did not fit is listed once in ``omitted``; a turn whose record
cannot be read is listed in ``skipped`` with the reason.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..doc import frontmatter
from ..doc import tokencount as tokens
from ..doc.turnrecord import (
    TurnRecord,
    is_turn_id,
    parse_sections,
    says_nothing_new,
    validate_keywords,
    validate_name,
)
from ..errors import InvalidDocument, InvalidInput, InvalidQuery
from ..index import dag, turnrows
from ..records import field, recordclass

if TYPE_CHECKING:
    from ..files.store import Store
    from ..index import Index
    from ..settings import Settings


class PackSource(Protocol):
    """What the pack reads: the index, the settings and the store's files."""

    index: Index
    settings: Settings
    store: Store


SNAPSHOT = "SNAPSHOT.md"
USER_SLACK = 8
KEYWORD_WINDOW = 100


@recordclass
class PackItem:
    """One entry of a pack: what it is, why it is there, its text and token count."""

    kind: str
    ref: str
    path: str
    reason: str
    text: str
    tokens: int = 0
    also: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "ref": self.ref,
            "path": self.path,
            "reason": self.reason,
            "also": list(self.also),
            "tokens": self.tokens,
            "text": self.text,
        }


@recordclass
class ContextPack:
    """The pack: its items in order, the rendered text, and its token accounting."""

    thread: str
    user: str
    keywords: tuple[str, ...]
    budget: int
    counter: str
    items: list[PackItem]
    text: str
    tokens: int
    omitted: list[dict[str, Any]]
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "thread": self.thread,
            "user": self.user,
            "keywords": list(self.keywords),
            "budget": self.budget,
            "tokens": self.tokens,
            "counter": self.counter,
            "items": [item.to_dict() for item in self.items],
            "omitted": self.omitted,
            "skipped": self.skipped,
            "text": self.text,
        }


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + "…"


def _header(thread: str, user: str, keywords: Sequence[str]) -> str:
    parts = [f"thread {thread}"]
    if user:
        parts.append(f"user {user}")
    if keywords:
        parts.append("keywords " + ", ".join(keywords))
    return "# memdir context\n\n_" + "; ".join(parts) + "_"


def _item_text(title: str, reason: str, body: str) -> str:
    return f"## {title}\n\n_why: {reason}_\n\n{body}".rstrip()


def _turn_body(rec: TurnRecord, form: str, limit: int) -> str:
    lines = []
    if rec.input.strip():
        lines.append("**Input:** " + _clip(rec.input, limit))
    # The default compactor's note for a turn without tool calls repeats the output.
    if form == "full" and rec.compact.strip() and not says_nothing_new(rec.compact.strip()):
        lines.append("**Work:**\n" + _clip(rec.compact, limit))
    if rec.output.strip():
        lines.append("**Output:** " + _clip(rec.output, limit))
    return "\n\n".join(lines)


class _Builder:
    def __init__(self, mem: PackSource, budget: int, counter: tokens.Counter) -> None:
        self.mem = mem
        self.conn: sqlite3.Connection = mem.index.conn
        self.budget = budget
        self.counter = counter
        self.items: list[PackItem] = []
        self.by_path: dict[str, PackItem] = {}
        self.omitted: list[dict[str, Any]] = []
        self.missed: dict[str, dict[str, Any]] = {}  # path -> its entry in omitted
        self.skipped: list[dict[str, Any]] = []
        self.used = 0
        self.sep = counter.count("\n\n")
        self.limit = max(mem.settings.turns.context_item_chars, 40)

    def offer(self, item: PackItem, tokens: int | None = None) -> bool:
        seen = self.by_path.get(item.path)
        if seen is not None:
            if item.reason not in seen.also and item.reason != seen.reason:
                seen.also.append(item.reason)
            return True
        item.tokens = self.counter.count(item.text) if tokens is None else tokens
        missed = self.missed.get(item.path)
        if self.used + self.sep + item.tokens > self.budget:
            if missed is None:
                self.omit(item)
            elif item.reason not in missed["also"] and item.reason != missed["reason"]:
                missed["also"].append(item.reason)
            return False
        if missed is not None:
            # It did not fit before (a longer form, under an earlier reason) but fits now.
            self.omitted.remove(self.missed.pop(item.path))
            item.also = [r for r in [missed["reason"], *missed["also"]] if r != item.reason]
        self.used += self.sep + item.tokens
        self.items.append(item)
        self.by_path[item.path] = item
        return True

    def omit(self, item: PackItem) -> None:
        entry: dict[str, Any] = {"ref": item.ref, "reason": item.reason, "also": list(item.also)}
        entry["tokens"] = item.tokens
        self.omitted.append(entry)
        self.missed[item.path] = entry

    def read_turn(self, row: Any) -> TurnRecord | str:
        """The sections of a turn file; the fields come from the index row (no YAML parse).

        A file that cannot be read as a turn record gives the reason instead.
        """
        try:
            text = (self.mem.store.root / row["path"]).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            return "the file is not UTF-8"
        except OSError as exc:
            return f"the file cannot be read ({exc.strerror or type(exc).__name__})"
        found = frontmatter.split(text)
        if found is None:
            return "the file has no closed frontmatter"
        try:
            inp, compact, out = parse_sections(found[1])
        except InvalidDocument as exc:
            return exc.message
        return TurnRecord(
            id=str(row["episode_id"] or ""),
            thread=str(row["thread"] or ""),
            user=str(row["user"] or ""),
            created=str(row["created"] or ""),
            input=inp,
            compact=compact,
            output=out,
        )

    def offer_turn(self, row: Any, reason: str, form: str) -> None:
        path = row["path"]
        if path in self.by_path:
            self.offer(PackItem("turn", row["episode_id"], path, reason, ""))
            return
        rec = self.read_turn(row)
        if isinstance(rec, str):
            if all(s["path"] != path for s in self.skipped):
                entry = {"ref": row["episode_id"], "path": path, "reason": reason, "error": rec}
                self.skipped.append(entry)
            return
        title = f"turn {rec.id} · thread {rec.thread} · {rec.created}"
        tried = ""
        # A turn that does not fit with its work (the compact of its tool calls) is offered
        # again as input and output alone before the pack moves on: the thread's latest
        # turn matters more than the items after it.
        for shape in (form, "short") if form == "full" else (form,):
            body = _turn_body(rec, shape, self.limit)
            if body == tried:
                return  # no work to leave out: the same text would not fit either
            tried = body
            text = _item_text(title, reason, body)
            # Counted in two parts: the body of a turn comes back in many packs under other
            # reasons, and the counter keeps counts by text. The heading ends in a blank
            # line, where cl100k never merges across, and the pack is counted again at the end.
            head = text[: len(text) - len(body.rstrip())] if body.strip() else text
            tokens = self.counter.count(head) + self.counter.count(text[len(head) :])
            if self.offer(PackItem("turn", rec.id, path, reason, text), tokens):
                return

    def offer_document(self, rel: str, reason: str, kind: str = "document") -> None:
        """A document's body (clipped), titled by its path."""
        if rel in self.by_path:
            self.offer(PackItem(kind, rel, rel, reason, ""))
            return
        try:
            text = (self.mem.store.root / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        body = _clip(frontmatter.body_of(text), self.limit)
        self.offer(PackItem(kind, rel, rel, reason, _item_text(rel, reason, body)))


def _newest(rows: list[sqlite3.Row]) -> list[sqlite3.Row]:
    return sorted(rows, key=lambda r: (r["created"] or "", r["episode_id"] or ""), reverse=True)


def build_pack(
    mem: PackSource,
    *,
    thread: str,
    user: str = "",
    keywords: Sequence[str] | str = (),
    budget: int | None = None,
) -> ContextPack:
    """Assemble the pack (the index must be in step; :meth:`memdir.Memory.context` syncs)."""
    cfg = mem.settings.turns
    thread = validate_name("thread", thread, required=True)
    user = validate_name("user", user, required=False)
    kws = validate_keywords(keywords)
    size = cfg.context_budget if budget is None else budget
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidInput(f"budget must be a positive number of tokens, got {size!r}")
    counter = tokens.counter(cfg.token_counter)
    header = _header(thread, user, kws)
    head_tokens = counter.count(header + "\n")
    if head_tokens > size:
        raise InvalidInput(f"budget {size} tokens is below the pack header ({head_tokens} tokens)")
    b = _Builder(mem, size, counter)
    b.used = head_tokens
    conn = b.conn

    # 1. the snapshot: mandatory, so a budget that cannot hold it is an error.
    snap = mem.store.root / SNAPSHOT
    if snap.is_file():
        text = snap.read_text(encoding="utf-8", errors="replace")
        text = frontmatter.body_of(text)
        item = PackItem("snapshot", SNAPSHOT, SNAPSHOT, "the store snapshot (tier 0)", "")
        item.text = _item_text("snapshot", item.reason, text.strip())
        if not b.offer(item):
            need = head_tokens + b.sep + item.tokens
            raise InvalidInput(
                f"budget {size} tokens is below what the snapshot alone needs ({need} tokens "
                f"with the header, counted with {counter.name}); raise the budget"
            )

    # 2. routers, top first.
    for rel in turnrows.routers(conn, max(cfg.context_routers, 0)):
        b.offer_document(rel, "top router" if rel == "index.md" else "router", "router")

    # 3. latest turns of the thread.
    thread_rows = _newest(
        turnrows.thread_latest(conn, thread, max(cfg.context_thread_turns, 0) + 8)
    )[: max(cfg.context_thread_turns, 0)]
    for row in thread_rows:
        b.offer_turn(row, f"latest turn of thread {thread}", "full")

    # 4. recent turns of the same user in other threads.
    if user and cfg.context_user_turns > 0:
        # The user's newest turns in other threads; a few more than needed, so turns
        # created in the same millisecond still sort by id.
        rows = turnrows.user_latest(conn, user, thread, cfg.context_user_turns + USER_SLACK)
        for row in _newest(rows)[: cfg.context_user_turns]:
            b.offer_turn(row, f"recent turn of user {user} in thread {row['thread']}", "full")

    # 5. turns matching the keywords, among the most recent matches.
    if kws and cfg.context_keyword_turns > 0:
        for row in _keyword_turns(conn, kws, cfg.context_keyword_turns):
            b.offer_turn(row, "matches keywords " + ", ".join(kws), "full")

    # 6. recent DAG ancestors of the thread's latest turn.
    if thread_rows and cfg.context_ancestors > 0 and is_turn_id(thread_rows[0]["episode_id"]):
        latest = thread_rows[0]["episode_id"]
        nodes = dag.walk(
            conn,
            latest,
            max(cfg.context_ancestor_depth, 1),
            cfg.context_ancestors * 4,
            up=True,
        )
        recent = sorted(nodes, key=lambda n: (n.created, n.id), reverse=True)
        recent = recent[: cfg.context_ancestors]
        for rank, node in enumerate(recent):
            form = "full" if rank < cfg.context_ancestors_compact else "io"
            fields = {
                "path": node.path,
                "episode_id": node.id,
                "thread": node.thread,
                "user": node.user,
                "created": node.created,
            }
            reason = f"ancestor of {latest} (depth {node.depth})"
            if node.type == "turn":
                b.offer_turn(fields, reason, form)
            else:  # a document the turns named as a parent: what they used
                b.offer_document(node.path, reason)

    parts = [header] + [item.text for item in b.items]
    text = "\n\n".join(parts) + "\n"
    total = counter.count(text)
    # Counts of parts are not exactly additive for BPE; drop from the end until it fits.
    while total > size and b.items:
        dropped = b.items.pop()
        if dropped.kind == "snapshot":
            raise InvalidInput(
                f"budget {size} tokens is below what the snapshot alone needs "
                f"({counter.count(header + chr(10) * 2 + dropped.text + chr(10))} tokens); "
                "raise the budget"
            )
        b.omit(dropped)
        text = "\n\n".join([header] + [item.text for item in b.items]) + "\n"
        total = counter.count(text)
    if total > size:
        raise InvalidInput(f"budget {size} tokens is below the pack header ({total} tokens)")
    return ContextPack(
        thread=thread,
        user=user,
        keywords=kws,
        budget=size,
        counter=counter.name,
        items=b.items,
        text=text,
        tokens=total,
        omitted=b.omitted,
        skipped=b.skipped,
    )


def _keyword_turns(conn: sqlite3.Connection, kws: Sequence[str], count: int) -> list[Any]:
    """The best ``count`` of the ``KEYWORD_WINDOW`` most recent turns matching any keyword.

    Ranked with BM25 term weights whose IDF is taken over that window (presence only),
    then newest first. FTS5's own bm25() reads every match of every term to weigh it,
    which grows with the store; reading rows newest first and stopping does not.
    """
    from ..index.search import fts_query

    terms: list[str] = []
    for kw in kws:
        try:
            terms.append("(" + fts_query(kw) + ")")
        except InvalidQuery:
            continue
    if not terms:
        return []
    cands = turnrows.matching_turns(conn, " OR ".join(terms), KEYWORD_WINDOW)
    if not cands:
        return []
    window = set(cands)
    low = min(cands)
    weight: dict[int, float] = {}
    for term in terms:
        # Every match of a term at or above ``low`` is an OR match too, so at most the window.
        found = turnrows.matches_from(conn, term, low) & window
        if not found:
            continue
        idf = math.log(1 + (len(cands) - len(found) + 0.5) / (len(found) + 0.5))
        for rowid in found:
            weight[rowid] = weight.get(rowid, 0.0) + idf
    # Within the window, newest first by the record's own time and id, never by rowid: a
    # rowid is the order rows reached this index (an import, a rebuild), not the turns' time.
    # Plain tuples of the sort columns first; whole rows only for the turns kept.
    keys = turnrows.sort_keys(conn, cands)
    keys.sort(key=lambda k: (k[1] or "", k[2] or ""), reverse=True)
    # A stable sort: turns of the same weight stay newest first.
    keys.sort(key=lambda k: -round(weight.get(int(k[0]), 0.0), 9))
    best = [int(k[0]) for k in keys[:count]]
    rows = turnrows.turns_by_id(conn, best)
    return [rows[r] for r in best if r in rows]
