"""The facts of folded turns, filed into bundle articles like any source; and the agent path
for turns: the plan packet's thread items and the pages an apply returns for them.

A thread page says what was asked, decided, done and answered. Its facts (each turn's
answer, oldest first; routing also reads the questions) are routed by the router consolidate
uses for inbox sources (by meaning, :meth:`memdir.engine.placing.Router.by_meaning`, when
the run's router can embed; else by words, :func:`memdir.engine.routing.route`) and,
where a bundle fits, written by the run's writer into one article per thread and bundle,
``thread: <name>`` in its frontmatter, citing the thread page (``sources: [{id, resource:
threads/<slug>.md}]``) and recording in ``merged-from`` every turn it was written from. A
later fold of the same thread writes that article again, at its path, from every turn. A
thread no bundle fits is listed under ``unrouted`` with the reason and the scores; its page
covers its turns anyway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..doc import frontmatter
from ..doc.turnrecord import TurnRecord
from ..errors import InvalidInput, ProviderError
from ..records import recordclass
from . import placing, routing, threads, wiki
from .files import Batch
from .harness import Harness
from .program import Program
from .terms import slugify
from .writer import ExtractiveWriter, SourceDoc, Writer, WriteRequest, check, render_article


def facts(turns: Sequence[TurnRecord], *, asked: bool = False) -> str:
    """What a thread's turns established, one paragraph per turn: each answer (what was
    decided and said), oldest first; with ``asked``, each question before its answer (what
    routing reads: the question names the subject as often as the answer)."""
    paragraphs = []
    for record in turns:
        texts = (record.input, record.output) if asked else (record.output,)
        parts = [" ".join(t.split()) for t in texts if t.strip()]
        parts = [p if p[-1] in ".!?" else p + "." for p in parts]
        if parts:
            paragraphs.append(" ".join(parts))
    return "\n\n".join(paragraphs)


@recordclass(frozen=True)
class Filing:
    program: Program
    harness: Harness
    writer: Writer
    actor: str
    at: str
    #: The run's router: by meaning when it can embed (as inbox sources are), else by words.
    router: placing.Router | None = None


def file_threads(batch: Batch, root: Path, folded: threads.Folded, how: Filing) -> set[str]:
    """Route and write the facts of every page ``folded`` wrote; the bundles written to.

    The articles go to ``folded.articles``, the threads no bundle took to
    ``folded.unrouted``."""
    bundles: set[str] = set()
    fallback = ExtractiveWriter()
    routes = _routes(root, folded, how)
    for page, (thread, turns) in sorted(folded.threads.items()):
        text = facts(turns)
        if not text:
            continue
        route = routes[page]
        if route.quarantined:
            scores = {k: round(v, 3) for k, v in route.scores.items()}
            folded.unrouted.append(
                {"thread": thread, "page": page, "reason": route.reason, "scores": scores}
            )
            continue
        sid = "src-" + hashlib.sha256(page.encode("utf-8")).hexdigest()[:8]
        source = SourceDoc(sid, page, page, f"Thread {thread}", text)
        for bundle in route.bundles:
            rel, article = _article(root, how, bundle, thread, source, turns, fallback)
            if article is None:
                folded.unrouted.append({"thread": thread, "page": page, "reason": rel})
                continue
            batch.write(rel, article)
            folded.articles.append(rel)
            bundles.add(bundle)
    return bundles


def _routes(root: Path, folded: threads.Folded, how: Filing) -> dict[str, routing.Route]:
    """The route of every folded page's facts (and questions): all together by meaning when
    the run's router can embed, each one by words otherwise."""
    items = [
        (page, f"Thread {thread}\n{facts(turns, asked=True)}")
        for page, (thread, turns) in sorted(folded.threads.items())
        if facts(turns)
    ]
    router = how.router
    if items and router is not None and router.embed is not None:
        return router.by_meaning(root, how.program.bundles, items)
    thresholds = how.program.thresholds
    return {
        page: routing.route(
            how.program.bundles, text, routing=thresholds.routing, quarantine=thresholds.quarantine
        )
        for page, text in items
    }


def _article(
    root: Path,
    how: Filing,
    bundle: str,
    thread: str,
    source: SourceDoc,
    turns: Sequence[TurnRecord],
    fallback: Writer,
) -> tuple[str, str | None]:
    """(path, article) for one thread in one bundle, or (why not, None)."""
    items = wiki.articles(root, bundle)
    mine = [a for a in items if a.fm.get("thread") == thread]
    spec = how.program.bundle(bundle)
    if mine:
        topic = mine[0].topic
    else:
        topics = sorted({a.topic for a in items if a.topic})
        topic, _ = routing.pick_topic(source.text, topics, spec.scope if spec else "")
    others = [a for a in items if a not in mine]
    request = WriteRequest(
        bundle, topic, source, wiki.related_candidates(others), how.program.budgets, how.harness
    )
    text = ""
    for writer in (how.writer, fallback):
        try:
            draft = writer.write(request)
        except Exception as exc:  # a plugin's own error, named with the thread
            raise ProviderError(
                f"writer '{writer.name}' failed on {source.resource}: {type(exc).__name__}: {exc}"
            ) from exc
        text = _with_turns(
            render_article(request, draft, at=how.at, actor=how.actor), thread, turns, how
        )
        problems = check(request, text)
        if not problems:
            break
        if writer is fallback or how.writer.name == fallback.name:
            return f"no article the harness accepts: {problems[0]}", None
    if mine:
        return mine[0].path, text
    title = frontmatter.parse(text).fm.get("title")
    base = slugify(str(title or thread))
    rel, n = f"wiki/{bundle}/{topic}/{base}.md", 2
    while (root / rel).exists():
        rel, n = f"wiki/{bundle}/{topic}/{base}-{n}.md", n + 1
    return rel, text


def _with_turns(text: str, thread: str, turns: Sequence[TurnRecord], how: Filing) -> str:
    """The article naming its thread and recording every turn it was written from."""

    def mutate(fm: Any) -> None:
        fm["thread"] = thread
        fm["merged-from"] = [
            {"type": "turn", "id": r.id, "path": r.path, "date": how.at, "actor": how.actor}
            for r in turns
        ]

    return frontmatter.edit(text, mutate)


# -- the agent path --------------------------------------------------------------------------


def plan_items(root: Path, rels: Sequence[str]) -> list[dict[str, Any]]:
    """The plan packet's ``threads``: each thread with unmerged turns, its turns and the page
    the deterministic fold would write (an example the agent may improve)."""
    items = []
    for item in threads.pending(root, rels):
        example = threads.render(
            item.thread, item.turns, item.entries(actor="<agent>", date="<RFC 3339 time>")
        )
        items.append(
            {
                "thread": item.thread,
                "page": item.page,
                "new_turns": [r.id for r in item.new],
                "turns": [
                    {
                        "id": r.id,
                        "path": r.path,
                        "created": r.created,
                        "user": r.user,
                        "input": r.input,
                        "output": r.output,
                        "compact": r.compact,
                    }
                    for r in item.turns
                ],
                "example_page": example,
            }
        )
    return items


def agent_pages(root: Path, data: Any, rels: Sequence[str]) -> dict[str, str]:
    """The thread pages of an apply packet (``{"threads": [{"thread", "page"}]}``), checked:
    a thread with unmerged turns, a page whose frontmatter parses and whose body cites each
    of those turns by id. InvalidInput lists every reason; nothing is filed then."""
    given = data.get("threads") if isinstance(data, Mapping) else None
    if given is None:
        return {}
    if not isinstance(given, list):
        raise InvalidInput('"threads" of an apply packet must be a list')
    waiting = {p.thread: p for p in threads.pending(root, rels)}
    pages: dict[str, str] = {}
    problems: list[str] = []
    for n, item in enumerate(given, start=1):
        where = f"threads[{n}]"
        thread = item.get("thread") if isinstance(item, Mapping) else None
        text = item.get("page") if isinstance(item, Mapping) else None
        if not isinstance(thread, str) or thread not in waiting:
            problems.append(f"{where}: thread {thread!r} has no unmerged turn")
            continue
        if thread in pages:
            problems.append(f"{where}: thread {thread!r} has a page earlier in the packet")
            continue
        if not isinstance(text, str) or not text.strip():
            problems.append(f"{where}: 'page' must be the markdown document")
            continue
        parsed = frontmatter.parse(text)
        if parsed.error:
            problems.append(f"{where}: the page's frontmatter does not parse ({parsed.error})")
            continue
        body = parsed.body if parsed.has_block else text
        missing = [r.id for r in waiting[thread].new if r.id not in body]
        if missing:
            problems.append(f"{where}: the page cites no turn {', '.join(missing)}")
            continue
        pages[thread] = (
            text if parsed.has_block else frontmatter.render({"title": f"Thread {thread}"}, text)
        )
    if problems:
        raise InvalidInput("refused, nothing filed:\n  " + "\n  ".join(problems))
    return pages
