"""Folding turn records into thread pages: the consolidation of turn episodes.

``memdir consolidate --turns`` reads every turn the memory report lists as unmerged, groups
them by thread and writes one semantic page per thread, ``threads/<slug>.md``: what was
asked, what was decided, what was done (the compact of each turn's tool calls) and what was
answered, each line citing its turn, and a ``merged-from`` entry for every turn it folded
(type ``turn``, the turn's id and path), so coverage of turn episodes reaches 100%. A later
run folds only the turns recorded since, into the same page, which is written again from
every turn it cites. The page is deterministic: the same turns give the same bytes (dates in
``merged-from`` excepted, which say when each turn was folded).

What is "decided" is found by words, not by a model: a sentence of an output that says so
("decided", "we will", "let's", "agreed", "chose", "going with" ...). A model writer or the
calling agent can write better prose over the same page (the ``merged-from`` list is what
coverage counts).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..doc import frontmatter
from ..doc.turnrecord import TURNS_DIR, TurnRecord, parse_turn, says_nothing_new
from ..errors import InvalidDocument
from ..records import field, recordclass
from .files import Batch
from .terms import slugify

THREADS_DIR = "threads"
LINES_PER_SECTION = 40  # the newest items of a long thread; its sources list every turn
CLIP = 240

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_DECISION = re.compile(
    r"\b(decid\w*|agreed|we(?:'ll| will| are going to)|let's|chose|choos\w+|going with|"
    r"settled on|plan is|from now on|switch(?:ed)? to)\b",
    re.IGNORECASE,
)


@recordclass
class Folded:
    """What a fold did: the pages written, the turns folded, and turns it could not read;
    ``threads`` keeps, per page written, its thread and every turn it cites (what the turn
    facts are routed from, :mod:`memdir.engine.turnfacts`); ``articles`` and ``unrouted``
    say where those facts went."""

    pages: list[str] = field(default_factory=list)
    turns: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    threads: dict[str, tuple[str, list[TurnRecord]]] = field(default_factory=dict)
    articles: list[str] = field(default_factory=list)
    unrouted: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pages": self.pages,
            "turns": self.turns,
            "skipped": self.skipped,
            "articles": self.articles,
            "unrouted": self.unrouted,
        }


@recordclass
class Pending:
    """One thread with turns to fold: its page, the page's current merged-from, every turn
    the page will cite (oldest first) and the new ones among them."""

    thread: str
    page: str
    merged: list[dict[str, Any]]
    turns: list[TurnRecord]
    new: list[TurnRecord]

    def entries(self, *, actor: str, date: str) -> list[dict[str, Any]]:
        """The page's merged-from after the fold: the old entries, then one per new turn."""
        return [
            *self.merged,
            *(
                {"type": "turn", "id": r.id, "path": r.path, "date": date, "actor": actor}
                for r in sorted(self.new, key=lambda r: r.id)
            ),
        ]


def unmerged_turns(unmerged: Iterable[str]) -> list[str]:
    """The turn records among the report's unmerged paths (their work logs are no episodes)."""
    return sorted(p for p in unmerged if p.startswith(TURNS_DIR + "/") and p.endswith(".md"))


def page_path(thread: str) -> str:
    """``threads/<slug>.md``; a thread whose slug is not itself gets a short hash, so two
    threads never share a page ("Ops 1" and "ops-1")."""
    slug = slugify(thread, 60)
    if slug != thread:
        slug += "-" + hashlib.sha256(thread.encode("utf-8")).hexdigest()[:8]
    return f"{THREADS_DIR}/{slug}.md"


def pending(root: Path, rels: Sequence[str], out: Folded | None = None) -> list[Pending]:
    """The threads of the turn records at ``rels`` that have turns their page lacks."""
    out = out if out is not None else Folded()
    by_thread: dict[str, list[TurnRecord]] = {}
    for rel in rels:
        record = _read(root, rel, out)
        if record is not None:
            by_thread.setdefault(record.thread, []).append(record)
    found = []
    for thread in sorted(by_thread):
        page = page_path(thread)
        merged = _merged_from(root / page)
        known = {str(item.get("id")) for item in merged}
        new = [r for r in by_thread[thread] if r.id not in known]
        if not new:
            continue
        earlier = [r for r in (_read(root, _path_of(i), out) for i in merged) if r is not None]
        turns = sorted({r.id: r for r in [*earlier, *new]}.values(), key=lambda r: r.id)
        found.append(Pending(thread, page, merged, turns, new))
    return found


def fold(
    batch: Batch,
    root: Path,
    rels: Sequence[str],
    *,
    actor: str,
    date: str,
    pages: Mapping[str, str] | None = None,
) -> Folded:
    """Fold the turn records at ``rels`` into their threads' pages (written through
    ``batch``, so a failed run puts every page back). ``pages`` maps a thread to the page an
    agent wrote for it (``consolidate --apply``), used instead of the rendered one."""
    out = Folded()
    for item in pending(root, rels, out):
        entries = item.entries(actor=actor, date=date)
        given = (pages or {}).get(item.thread)
        text = with_entries(given, entries) if given else render(item.thread, item.turns, entries)
        batch.write(item.page, text)
        out.pages.append(item.page)
        out.turns += len(item.new)
        out.threads[item.page] = (item.thread, item.turns)
    return out


def with_entries(text: str, entries: list[dict[str, Any]]) -> str:
    """An agent's page with the keys memdir owns set: its kind and its ``merged-from``."""

    def mutate(fm: Any) -> None:
        fm["type"] = "thread"
        fm["memory_kind"] = "semantic"
        fm["merged-from"] = entries

    return frontmatter.edit(text, mutate)


def _read(root: Path, rel: str, out: Folded) -> TurnRecord | None:
    try:
        return parse_turn((root / rel).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        out.skipped.append({"path": rel, "reason": f"unreadable: {exc}"})
    except InvalidDocument as exc:
        out.skipped.append({"path": rel, "reason": exc.message})
    return None


def _path_of(item: Mapping[str, Any]) -> str:
    return str(item.get("path") or "")


def _merged_from(page: Path) -> list[dict[str, Any]]:
    """The turn entries of an existing page's ``merged-from`` (none for a new page)."""
    if not page.is_file():
        return []
    parsed = frontmatter.parse(page.read_text(encoding="utf-8", errors="replace"))
    items = parsed.fm.get("merged-from") if parsed.has_block and not parsed.error else None
    if not isinstance(items, list):
        return []
    return [
        dict(item)
        for item in items
        if isinstance(item, Mapping) and item.get("type") == "turn" and item.get("path")
    ]


def render(thread: str, turns: Sequence[TurnRecord], entries: list[dict[str, Any]]) -> str:
    """The page of a thread: frontmatter, then Asked, Decided, Done, Answered and Sources."""
    notes = {r.id: n for n, r in enumerate(turns, start=1)}
    users = sorted({r.user for r in turns if r.user})
    first, last = turns[0].created, turns[-1].created
    fm: dict[str, Any] = {
        "type": "thread",
        "memory_kind": "semantic",
        "title": f"Thread {thread}",
        "thread": thread,
        "turns": len(turns),
        "first": first,
        "last": last,
        "merged-from": entries,
    }
    who = f"; users: {', '.join(users)}" if users else ""
    count = f"{len(turns)} turn" + ("s" if len(turns) != 1 else "")
    lines = [f"# Thread {thread}", "", f"{count} from {first} to {last}{who}."]
    sections = (
        ("Asked", [(r, _clip(r.input)) for r in turns if r.input.strip()]),
        ("Decided", [(r, s) for r in turns for s in _decisions(r.output)]),
        ("Done", [(r, _clip(_work(r.compact))) for r in turns if _work(r.compact)]),
        ("Answered", [(r, _clip(r.output)) for r in turns if r.output.strip()]),
    )
    for title, items in sections:
        if not items:
            continue
        lines += ["", f"## {title}", ""]
        if len(items) > LINES_PER_SECTION:
            lines.append(f"_The last {LINES_PER_SECTION} of {len(items)}; the sources list all._")
            lines.append("")
        lines += [f"- {text} [^{notes[r.id]}]" for r, text in items[-LINES_PER_SECTION:]]
    lines += ["", "## Sources", ""]
    for r in turns:
        user = f", {r.user}" if r.user else ""
        lines.append(f"[^{notes[r.id]}]: [turn {r.id}](../{r.path}) {r.created}{user}")
    return frontmatter.render(fm, "\n".join(lines) + "\n")


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= CLIP else flat[: CLIP - 1].rstrip() + "…"


def _work(compact: str) -> str:
    """What a turn did with its tools (nothing for the no-tool-calls note)."""
    text = compact.strip()
    return "" if not text or says_nothing_new(text) else text


def _decisions(output: str) -> list[str]:
    return [_clip(s) for s in _SENTENCE.split(" ".join(output.split())) if _DECISION.search(s)]
