"""consolidate: inbox sources -> routed, cited articles (or quarantine), plus the work packet
(``--plan``) and its validation on return (``--apply``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..doc import frontmatter
from ..doc.ids import new_id
from ..doc.text import bad_char
from ..errors import InvalidInput, MemdirError, ProviderError
from ..kiwi import report as coverage
from ..records import field, recordclass, replace
from . import judge as judging
from . import routing, updates, wiki
from .files import Batch
from .harness import Harness
from .judge import Judge, Review
from .placing import (
    Router,
    Source,
    is_merged,
    placement,
    route_sources,
    subject_article,
    unseen_sources,
    with_entries,
)
from .program import Program
from .reflect import now_utc, rfc3339
from .terms import slugify
from .writer import (
    Draft,
    ExtractiveWriter,
    Writer,
    WriteRequest,
    check,
    render_article,
)

PACKET_KIND = "memdir.consolidate.plan"


@recordclass
class Outcome:
    articles: list[str] = field(default_factory=list)
    quarantined: list[dict[str, str]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    bundles: set[str] = field(default_factory=set)
    lessons_recalled: int = 0
    placements: list[dict[str, Any]] = field(default_factory=list)
    router: str = "lexical"  # what routed this run: "meaning" or "lexical"
    router_note: str = ""  # why the lexical router was used ("" with meaning)
    judged: Review | None = None  # what the route judge did, when there was one


Recall = Callable[[str], tuple[str, ...]]
"""Given a source's opening text: the lessons and relevant past episodes to respect."""


def _request(
    root: Path,
    program: Program,
    harness: Harness,
    src: Source,
    bundle: str,
    *,
    cache: dict[str, list[wiki.Article]],
    recall: Recall | None = None,
) -> tuple[WriteRequest, str]:
    """The write request for one source in one bundle, and the target path."""
    if bundle not in cache:
        cache[bundle] = wiki.articles(root, bundle)
    items = cache[bundle]
    topics = sorted({a.topic for a in items if a.topic})
    spec = program.bundle(bundle)
    hint = src.fm.get("topic") if isinstance(src.fm.get("topic"), str) else None
    topic, _ = routing.pick_topic(src.body, topics, spec.scope if spec else "", hint=hint)
    doc = src.doc()
    request = WriteRequest(
        bundle,
        topic,
        doc,
        wiki.related_candidates(items),
        program.budgets,
        harness,
        recall=recall(doc.title + " " + src.body[:400]) if recall else (),
    )
    return request, ""


def target_path(root: Path, request: WriteRequest, title: str, taken: set[str]) -> str:
    base = slugify(title)
    n = 1
    while True:
        slug = base if n == 1 else f"{base}-{n}"
        rel = f"wiki/{request.bundle}/{request.topic}/{slug}.md"
        if rel not in taken and not (root / rel).exists():
            return rel
        n += 1


def quarantine(
    batch: Batch, src: Source, reason: str, scores: Mapping[str, float], *, by: str = ""
) -> str:
    """Move ``src`` to ``quarantine/`` with the reason, the time and the routing scores;
    ``by`` names who decided it when that was not the router (an agent's apply packet)."""
    text = (batch.store.root / src.path).read_text(encoding="utf-8", errors="replace")
    stamp = rfc3339(now_utc())

    def mutate(fm: Any) -> None:
        fm["quarantine_reason"] = reason
        fm["quarantined_at"] = stamp
        fm["route_scores"] = {k: round(v, 3) for k, v in scores.items()}
        if by:
            fm["quarantined_by"] = by

    new = (
        frontmatter.edit(text, mutate)
        if frontmatter.parse(text).has_block
        else (
            frontmatter.render(
                {
                    # A file dropped by hand with no frontmatter has only its name: two such
                    # notes.md, quarantined at different times, would share one id, and a
                    # merge of one would cover the other. It gets a fresh id, as ingest gives.
                    "episode_id": new_id(),
                    "memory_kind": "episodic",
                    "type": "ingest",
                    "quarantine_reason": reason,
                    "quarantined_at": stamp,
                },
                text,
            )
        )
    )
    rel = free_path(batch.store.root, "quarantine/" + src.path.split("/", 1)[1])
    batch.write(rel, new)
    batch.delete(src.path)
    return rel


def free_path(root: Path, rel: str) -> str:
    """``rel``, or ``<stem>-2.md``, ``-3`` ... when a file is there already.

    Two inbox files of the same name (dropped in by hand, one after the other) must not
    overwrite each other in quarantine/.
    """
    if not (root / rel).exists():
        return rel
    stem = rel[:-3] if rel.lower().endswith(".md") else rel
    n = 2
    while (root / f"{stem}-{n}.md").exists():
        n += 1
    return f"{stem}-{n}.md"


def run(
    batch: Batch,
    root: Path,
    program: Program,
    harness: Harness,
    writer: Writer,
    *,
    actor: str,
    limit: int | None = None,
    recall: Recall | None = None,
    router: Router | None = None,
    judge: Judge | None = None,
) -> Outcome:
    """Consolidate every unseen inbox source (the files are written through ``batch``);
    with ``judge``, its verdicts place the sources the router placed (:mod:`.judge`)."""
    out = Outcome()
    out.router = router.method if router is not None else "lexical"
    out.router_note = (
        ""
        if router is not None and router.embed is not None
        else (router.why if router is not None else "no embedder was given")
    )
    cache: dict[str, list[wiki.Article]] = {}
    taken: set[str] = set()
    fallback = ExtractiveWriter()
    sources = unseen_sources(root)
    if limit is not None and limit < 1:
        raise InvalidInput(f"limit must be at least 1, got {limit}")
    sources = sources[:limit]
    routes = route_sources(root, program, sources, router)
    if judge is not None:
        texts = {s.path: (s.doc().title, s.body) for s in sources if not s.unreadable}
        routes, out.judged = judging.review(routes, texts, program.bundles, judge)
        out.notes += out.judged.notes
    written: dict[str, str] = {}  # article path -> the text this run wrote
    for src in sources:
        if src.unreadable:
            out.skipped.append(src.unreadable)
            continue
        route = routes[src.path]
        record = placement(src, route)
        out.placements.append(record)
        if route.quarantined:
            said = route.details.get("judge")
            by = f"judge {said['by']}" if isinstance(said, dict) else ""
            rel = quarantine(batch, src, route.reason, route.scores, by=by)
            out.quarantined.append({"source": src.path, "to": rel, "reason": route.reason})
            record["quarantined"] = rel
            continue
        for bundle in route.bundles:
            request, _ = _request(root, program, harness, src, bundle, cache=cache, recall=recall)
            draft = _draft(writer, request)
            at = rfc3339(now_utc())
            text = render_article(request, draft, at=at, actor=actor)
            problems = check(request, text)
            if problems and writer.name != fallback.name:
                out.notes.append(f"{src.path}: {writer.name} draft refused ({problems[0]})")
                draft = fallback.write(request)
                text = render_article(request, draft, at=at, actor=actor)
                problems = check(request, text)
            if problems:
                out.skipped.append(f"{src.path}: {'; '.join(problems)}")
                continue
            out.notes += [f"{src.path}: {n}" for n in draft.notes]
            subject, similarity = subject_article(root, src, bundle, cache[bundle], router)
            source_entry = {
                "id": request.source.id,
                "resource": request.source.resource,
                "title": request.source.title,
                "date": src.date or at,
            }
            merge_entry = {
                "type": "ingest",
                "id": src.episode_id,
                "path": src.path,
                "date": at,
                "actor": actor,
                "sha256": src.sha256,
            }
            if subject is not None:
                merged = updates.merge(
                    (root / subject.path).read_text(encoding="utf-8", errors="replace")
                    if subject.path not in written
                    else written[subject.path],
                    source=source_entry,
                    merged_from=merge_entry,
                    key_points=draft.key_points,
                    description=draft.description,
                    at=at,
                    actor=actor,
                    edited=bool(src.edited_of),
                    similarity=router.similarity() if router is not None else None,
                    claim_similarity=router.claim_similarity if router is not None else 1.0,
                    cue_similarity=router.cue_similarity if router is not None else 1.0,
                )
                rel = subject.path
                text = merged.text
                problems = check(replace(request, topic=subject.topic), text)
                if problems:
                    raise InvalidInput(f"{src.path}: the update of {rel} fails: {problems[0]}")
                action = merged.action
                extra: dict[str, Any] = {"similarity": round(similarity, 3)}
                if merged.superseded:
                    extra["superseded"] = merged.superseded
            else:
                rel = target_path(root, request, draft.title, taken)
                text = with_entries(text, source_entry, merge_entry)
                action, extra = "new", {}
                if similarity > 0:
                    extra["nearest_similarity"] = round(similarity, 3)
            taken.add(rel)
            batch.write(rel, text)
            written[rel] = text
            if rel not in out.articles:
                out.articles.append(rel)
            out.bundles.add(bundle)
            record["placed"].append(
                {"bundle": bundle, "topic": rel.split("/")[2], "article": rel, "action": action}
                | extra
            )
            parsed = frontmatter.parse(text)
            slug = rel.rsplit("/", 1)[1][:-3]
            cache[bundle] = [a for a in cache[bundle] if a.path != rel]
            cache[bundle].append(
                wiki.Article(rel, bundle, rel.split("/")[2], slug, parsed.fm, parsed.body, None)
            )
    return out


def _draft(writer: Writer, request: WriteRequest) -> Draft:
    """The writer's draft; a writer plugin that raises is a ProviderError naming it and the
    source (the run then stops and puts back what it wrote)."""
    try:
        return writer.write(request)
    except Exception as exc:  # a plugin's own error: named, not passed on bare
        raise ProviderError(
            f"writer '{writer.name}' failed on {request.source.resource}: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


# ---- the work packet ---------------------------------------------------------------------


def plan(
    root: Path,
    program: Program,
    harness: Harness,
    recall: Recall | None = None,
    router: Router | None = None,
) -> dict[str, Any]:
    """A JSON work packet: one item per unseen source, with the contract and a draft."""
    cache: dict[str, list[wiki.Article]] = {}
    items: list[dict[str, Any]] = []
    quarantined: list[dict[str, Any]] = []
    skipped: list[str] = []
    extractive = ExtractiveWriter()
    sources = unseen_sources(root)
    routes = route_sources(root, program, sources, router)
    for src in sources:
        if src.unreadable:
            skipped.append(src.unreadable)
            continue
        route = routes[src.path]
        if route.quarantined:
            quarantined.append(
                {"source": src.path, "reason": route.reason, "scores": dict(route.scores)}
            )
            continue
        for bundle in route.bundles:
            request, _ = _request(root, program, harness, src, bundle, cache=cache, recall=recall)
            draft: Draft = extractive.write(request)
            example = render_article(request, draft, at="<RFC 3339 time>", actor="<agent>")
            items.append(
                {
                    "source": {
                        "path": src.path,
                        "episode_id": src.episode_id,
                        "id": request.source.id,
                        "title": request.source.title,
                        "text": src.body,
                    },
                    "bundle": bundle,
                    "topic": request.topic,
                    # How the router placed it (its bundles and scores), for the agent to weigh.
                    "route": {
                        k: v
                        for k, v in placement(src, route).items()
                        if k not in ("source", "placed")
                    },
                    "related_candidates": [r.path for r in request.candidates],
                    "recall": list(request.recall),
                    "example_article": example,
                }
            )
    return {
        "kind": PACKET_KIND,
        "version": 1,
        "harness_sha256": harness.sha256,
        "contract": {
            "required_keys": list(harness.required_keys),
            "required_sections": list(harness.required_sections),
            "cited_sections": list(harness.cited_sections),
            "status_values": list(harness.status_values),
            "citation": "end each claim with [^<sources[].id>] and define [^id]: <resource>",
            "return": '{"articles": [{"source": <source.path>, "bundle": str, "topic": str, '
            '"article": <markdown document>}], "quarantine": [{"source": <source.path>, '
            '"reason": str}]}',
            "quarantine": "a source no bundle is for: its path and why, instead of an article "
            "(it is moved to quarantine/ and can be released later); a source the packet names "
            "in neither list stays in the inbox",
        },
        "items": items,
        "quarantine": quarantined,
        "skipped": skipped,
    }


MAX_REASON_CHARS = 500  # an agent's quarantine reason: one line of at most this many


@recordclass
class Applied:
    """An apply packet once checked: the articles to write (path, request, text) and the
    sources to quarantine (source, reason)."""

    articles: list[tuple[str, WriteRequest, str]] = field(default_factory=list)
    quarantine: list[tuple[Source, str]] = field(default_factory=list)


def validate_apply(
    root: Path,
    program: Program,
    harness: Harness,
    data: Any,
    *,
    check_file: Callable[[str, str], object] | None = None,
) -> Applied:
    """Check every returned article and quarantine; InvalidInput lists every reason
    (nothing is filed, nothing moved).

    ``check_file(path, text)`` (Store.check_document) raises for an article no write would
    accept (a lone surrogate, a NUL byte, over the size limit): refused here with the rest,
    not discovered while the articles are being written.
    """
    shape = 'an apply packet must be a JSON object {"articles": [...], "quarantine": [...]}'
    if not isinstance(data, Mapping):
        raise InvalidInput(shape)
    listed = data.get("articles", [] if "quarantine" in data else None)
    held = data.get("quarantine", [])
    if not isinstance(listed, list) or not isinstance(held, list):
        raise InvalidInput(shape)
    pending = {s.path: s for s in unseen_sources(root)}
    cache: dict[str, list[wiki.Article]] = {}
    problems: list[str] = []
    accepted: list[tuple[str, WriteRequest, str]] = []
    taken: set[str] = set()
    filed: set[str] = set()  # sources: one article each
    for n, item in enumerate(listed, start=1):
        where = f"articles[{n}]"
        src = _unseen(item, where, pending, problems)
        if src is None:
            continue
        bundle = item.get("bundle")
        text = item.get("article")
        if src.path in filed:
            problems.append(f"{where}: source {src.path!r} has an article earlier in the packet")
            continue
        filed.add(src.path)
        if not isinstance(bundle, str) or program.bundle(bundle) is None:
            problems.append(f"{where}: bundle {bundle!r} is not in PROGRAM.md")
            continue
        if not isinstance(text, str):
            problems.append(f"{where}: 'article' must be the markdown document")
            continue
        request, _ = _request(root, program, harness, src, bundle, cache=cache)
        topic = item.get("topic")
        if isinstance(topic, str) and topic.strip():
            request = WriteRequest(
                bundle,
                slugify(topic),
                request.source,
                request.candidates,
                request.budgets,
                request.harness,
            )
        text = _with_merge(text, src)
        found = check(request, text)
        if found:
            problems += [f"{where} ({src.path}): {p}" for p in found]
            continue
        title = frontmatter.parse(text).fm.get("title")
        rel = target_path(root, request, str(title), taken)
        if check_file is not None:
            try:
                check_file(rel, text)
            except MemdirError as exc:
                problems.append(f"{where} ({src.path}): {exc}")
                continue
        taken.add(rel)
        accepted.append((rel, request, text))
    held_back = _held(held, pending, filed, problems)
    if problems:
        raise InvalidInput("refused, nothing filed:\n  " + "\n  ".join(problems))
    return Applied(accepted, held_back)


def _unseen(
    item: Any, where: str, pending: Mapping[str, Source], problems: list[str]
) -> Source | None:
    """The unseen, readable inbox source a packet entry names; None, with the problem
    noted, when it names none."""
    if not isinstance(item, Mapping):
        problems.append(f"{where}: not an object")
        return None
    src = pending.get(str(item.get("source", "")))
    if src is None:
        problems.append(f"{where}: source {item.get('source')!r} is not an unseen inbox source")
        return None
    if src.unreadable:
        problems.append(f"{where}: {src.unreadable}")
        return None
    return src


def _held(
    items: list[Any], pending: Mapping[str, Source], filed: set[str], problems: list[str]
) -> list[tuple[Source, str]]:
    """The packet's quarantine list checked: each an unseen readable source the packet files
    no article for, named once, with a reason (its whitespace made one line)."""
    out: list[tuple[Source, str]] = []
    named: set[str] = set()
    for n, item in enumerate(items, start=1):
        where = f"quarantine[{n}]"
        src = _unseen(item, where, pending, problems)
        if src is None:
            continue
        reason = item.get("reason")
        if src.path in filed:
            problems.append(f"{where}: source {src.path!r} has an article in the packet")
            continue
        if src.path in named:
            problems.append(f"{where}: source {src.path!r} is named earlier in the list")
            continue
        named.add(src.path)
        line = " ".join(reason.split()) if isinstance(reason, str) else ""
        if not line:
            problems.append(f"{where} ({src.path}): 'reason' must say why, in words")
            continue
        if len(line) > MAX_REASON_CHARS:
            problems.append(
                f"{where} ({src.path}): 'reason' is {len(line)} characters, "
                f"at most {MAX_REASON_CHARS}"
            )
            continue
        if bad_char(line):
            problems.append(f"{where} ({src.path}): 'reason' holds a character no file can hold")
            continue
        out.append((src, line))
    return out


def _with_merge(text: str, src: Source) -> str:
    """The article with merged-from naming its source (added when the agent left it out)."""
    parsed = frontmatter.parse(text)
    if not parsed.has_block or parsed.error:
        return text
    if is_merged(
        coverage.facts_for(src.path, parsed.fm, 0.0).merged_keys, src.episode_id, src.path
    ):
        return text  # an entry the memory report counts is there already

    def mutate(fm: Any) -> None:
        entry = {
            "type": "ingest",
            "id": src.episode_id,
            "path": src.path,
            "date": rfc3339(now_utc()),
        }
        if isinstance(fm.get("merged-from"), list):
            fm["merged-from"].append(entry)
        else:
            fm["merged-from"] = [entry]

    return frontmatter.edit(text, mutate)


def load_apply_file(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"cannot read apply file {path}: {exc}") from None
