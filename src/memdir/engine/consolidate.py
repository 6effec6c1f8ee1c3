"""consolidate: inbox sources -> routed, cited articles (or quarantine), plus the work packet
(``--plan``) and its validation on return (``--apply``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..doc import frontmatter, paths
from ..doc.ids import new_id
from ..errors import InvalidInput, MemdirError, ProviderError
from ..kiwi import report as coverage
from . import meaning, routing, updates, wiki
from .files import Batch, markdown_under
from .harness import Harness
from .program import Program
from .reflect import now_utc, rfc3339
from .terms import slugify
from .writer import (
    Draft,
    ExtractiveWriter,
    SourceDoc,
    Writer,
    WriteRequest,
    check,
    render_article,
    source_title,
)

PACKET_KIND = "memdir.consolidate.plan"


@dataclass
class Source:
    path: str
    episode_id: str
    fm: dict[str, Any]
    body: str
    error: str | None = None  # the frontmatter does not parse
    edited_of: str = ""  # an article that merged an earlier version of this source
    sha256: str = ""  # of the source file as read

    @property
    def date(self) -> str:
        """The source's own ``date`` key (as text), or ""."""
        value = self.fm.get("date")
        return str(value).strip() if value is not None else ""

    @property
    def unreadable(self) -> str:
        """Why the source cannot be consolidated as it is ("" when it can)."""
        if self.error is None:
            return ""
        return (
            f"{self.path}: {self.error}; its keys (bundle, topic, title) cannot be read, so "
            "it stays in inbox/ until the frontmatter is fixed"
        )

    def doc(self) -> SourceDoc:
        sid = "src-" + slugify(self.episode_id)[-8:]
        title = source_title(self.body, self.fm, Path(self.path).stem)
        return SourceDoc(sid, self.path, self.episode_id, title, self.body)


@dataclass
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


@dataclass(frozen=True)
class Router:
    """How a run routes: by meaning when ``embed`` is given, else by words (``why``)."""

    embed: meaning.Embed | None = None
    tuning: meaning.Tuning = meaning.Tuning()
    why: str = "no embedder was given"
    update_similarity: float = 0.65

    @property
    def method(self) -> str:
        return "meaning" if self.embed is not None else "lexical"


def merged_keys(root: Path) -> set[str]:
    """The memory report's match keys of every wiki page's ``merged-from`` items."""
    keys: set[str] = set()
    for rel in markdown_under(root, "wiki"):
        fm = frontmatter.parse((root / rel).read_text(encoding="utf-8", errors="replace")).fm
        keys.update(coverage.facts_for(rel, fm, 0.0).merged_keys)
    return keys


def is_merged(keys: Collection[str], episode_id: str, path: str) -> bool:
    """Whether ``keys`` cover the source, by the rule the memory report applies.

    So consolidate treats a source as done exactly when the report counts it as merged: an
    item with a compatible type (``ingest``, ``episode`` ...) and the source's id, or any
    item naming its path. An item of another type naming only the id covers nothing.
    """
    ident = episode_id.strip()
    if ident and any(f"{kind}:{ident}" in keys for kind in coverage.COMPATIBLE_TYPES):
        return True
    return "episode:path:" + path in keys


def merged_hashes(root: Path) -> dict[str, tuple[str, set[str]]]:
    """Per merged source id: the article that merged it last and every content hash recorded
    for it (``merged-from[].sha256``, written since updates were added)."""
    out: dict[str, tuple[str, set[str]]] = {}
    for rel in markdown_under(root, "wiki"):
        fm = frontmatter.parse((root / rel).read_text(encoding="utf-8", errors="replace")).fm
        items = fm.get("merged-from")
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and item.get("id") and item.get("sha256"):
                _, seen = out.setdefault(str(item["id"]), (rel, set()))
                seen.add(str(item["sha256"]))
                out[str(item["id"])] = (rel, seen)
    return out


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def unseen_sources(root: Path) -> list[Source]:
    """Inbox sources no wiki page's merged-from covers yet (see :func:`is_merged`), and
    sources merged before whose content changed since (``edited_of`` names the article)."""
    keys = merged_keys(root)
    hashes = merged_hashes(root)
    out = []
    for rel in markdown_under(root, "inbox"):
        text = (root / rel).read_text(encoding="utf-8", errors="replace")
        parsed = frontmatter.parse(text)
        eid = parsed.fm.get("episode_id")
        eid = eid.strip() if isinstance(eid, str) and eid.strip() else Path(rel).stem
        digest = content_hash(parsed.body)
        edited_of = ""
        if is_merged(keys, eid, rel):
            article, seen = hashes.get(eid, ("", set()))
            if not seen or digest in seen:
                continue
            edited_of = article  # merged, then edited: consolidated again into its article
        out.append(Source(rel, eid, parsed.fm, parsed.body, parsed.error, edited_of, digest))
    return out


def router_for(settings: Any) -> Router:
    """The router the settings ask for (``[engine] router`` and the ``route_*`` tuning)."""
    embed, why = meaning.embedder_for(settings)
    e = settings.engine
    tuning = meaning.Tuning(e.route_margin, e.route_second, e.route_lexical_weight)
    return Router(embed, tuning, why, e.update_similarity)


def _route_text(src: Source) -> str:
    title = src.fm.get("title") if isinstance(src.fm.get("title"), str) else ""
    return f"{title}\n{src.body}"


def _route(program: Program, src: Source) -> routing.Route:
    """The route of one source by words, or what its own keys say."""
    fixed = _fixed_route(program, src)
    if fixed is not None:
        return fixed
    return routing.route(
        program.bundles,
        _route_text(src),
        routing=program.thresholds.routing,
        quarantine=program.thresholds.quarantine,
    )


def _fixed_route(program: Program, src: Source) -> routing.Route | None:
    if src.edited_of:
        bundle = src.edited_of.split("/")[1]
        return routing.Route((bundle,), {bundle: 1.0}, {}, "", method="edited")
    if not src.body.strip():
        return routing.Route((), {}, {}, "the source is empty", method="none")
    hint = src.fm.get("bundle")
    if isinstance(hint, str) and program.bundle(hint):
        return routing.Route((hint,), {hint: 1.0}, {}, "bundle named by the source", method="hint")
    return None


def article_profile(article: wiki.Article) -> str:
    """The text of an article the meaning router compares sources with."""
    return f"{article.title}\n{article.description}\n{article.body[:1500]}"


def subject_profile(root: Path, article: wiki.Article) -> str:
    """What an article is about, to compare a new source with: the text of the sources it
    was written from when they are still in inbox/, else its title and body."""
    texts = []
    for item in article.fm.get("sources") or []:
        resource = item.get("resource") if isinstance(item, dict) else None
        if isinstance(resource, str) and resource.startswith("inbox/"):
            # The article's text names the path: only a regular inbox file of the store is
            # read ("inbox/../../etc/passwd" or a symlink out is not).
            rel = posixpath.normpath(resource)
            if rel.startswith("inbox/") and any(paths.readable_files(root, [rel])):
                text = (root / rel).read_text(encoding="utf-8", errors="replace")
                texts.append(frontmatter.parse(text).body.strip())
    return "\n".join(texts[-1:]) if texts else article_profile(article)


def route_sources(
    root: Path, program: Program, sources: list[Source], router: Router | None
) -> dict[str, routing.Route]:
    """The route of every readable source, by meaning when the router can embed.

    By meaning, all sources are routed together (most confident first, each one filed joins
    its bundle's profile: :mod:`memdir.engine.meaning`)."""
    routes: dict[str, routing.Route] = {}
    todo: list[Source] = []
    for src in sources:
        if src.unreadable:
            continue
        fixed = _fixed_route(program, src)
        if fixed is not None:
            routes[src.path] = fixed
        elif router is None or router.embed is None:
            routes[src.path] = _route(program, src)
        else:
            todo.append(src)
    if todo and router is not None and router.embed is not None:
        members = {
            b.name: [article_profile(a) for a in wiki.articles(root, b.name)]
            for b in program.bundles
        }
        items = [(s.path, _route_text(s)) for s in todo]
        routes.update(
            meaning.route_all(router.embed, program.bundles, items, members, router.tuning)
        )
    return routes


def placement(src: Source, route: routing.Route) -> dict[str, Any]:
    """The record of where a source went and why (``consolidate --json``, ``placements``)."""
    out: dict[str, Any] = {"source": src.path, "router": route.method}
    out["bundles"] = list(route.bundles)
    out["scores"] = dict(route.scores)
    for key in ("meaning", "lexical", "background"):
        if key in route.details:
            out[key] = route.details[key]
    if route.reason:
        out["reason"] = route.reason
    out["placed"] = []
    return out


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


def quarantine(batch: Batch, src: Source, reason: str, scores: Mapping[str, float]) -> str:
    text = (batch.store.root / src.path).read_text(encoding="utf-8", errors="replace")
    stamp = rfc3339(now_utc())

    def mutate(fm: Any) -> None:
        fm["quarantine_reason"] = reason
        fm["quarantined_at"] = stamp
        fm["route_scores"] = {k: round(v, 3) for k, v in scores.items()}

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
) -> Outcome:
    """Consolidate every unseen inbox source (the files are written through ``batch``)."""
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
    written: dict[str, str] = {}  # article path -> the text this run wrote
    for src in sources:
        if src.unreadable:
            out.skipped.append(src.unreadable)
            continue
        route = routes[src.path]
        record = placement(src, route)
        out.placements.append(record)
        if route.quarantined:
            rel = quarantine(batch, src, route.reason, route.scores)
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
            subject, similarity = _subject_article(root, src, bundle, cache[bundle], router)
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
                )
                rel = subject.path
                text = merged.text
                problems = check(dataclasses.replace(request, topic=subject.topic), text)
                if problems:
                    raise InvalidInput(f"{src.path}: the update of {rel} fails: {problems[0]}")
                action = merged.action
                extra: dict[str, Any] = {"similarity": round(similarity, 3)}
                if merged.superseded:
                    extra["superseded"] = merged.superseded
            else:
                rel = target_path(root, request, draft.title, taken)
                text = _with_entries(text, source_entry, merge_entry)
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


def _with_entries(text: str, source: dict[str, Any], merge: dict[str, Any]) -> str:
    """A new article's ``sources`` and ``merged-from`` entries with the source's date and
    content hash (what updates compare)."""

    def mutate(fm: Any) -> None:
        for item in fm.get("sources") or []:
            if isinstance(item, dict) and item.get("id") == source["id"]:
                item["date"] = source["date"]
        for item in fm.get("merged-from") or []:
            if isinstance(item, dict) and item.get("id") == merge["id"]:
                item["sha256"] = merge["sha256"]

    return frontmatter.edit(text, mutate)


_VECTORS: dict[str, Any] = {}  # article profile text -> vector, within one process


def _subject_article(
    root: Path, src: Source, bundle: str, items: list[wiki.Article], router: Router | None
) -> tuple[wiki.Article | None, float]:
    """The article of ``bundle`` this source is about (an update), and the similarity.

    An edited source goes back to the article that merged it. Otherwise the nearest
    article by meaning (``update_similarity``) or, without the embedder, by shared terms
    (:data:`memdir.engine.updates.LEXICAL_SUBJECT`)."""
    if src.edited_of:
        match = next((a for a in items if a.path == src.edited_of), None)
        return match, 1.0
    if not items:
        return None, 0.0
    text = _route_text(src)
    if router is not None and router.embed is not None:
        profiles = [subject_profile(root, a) for a in items]
        missing = [p for p in profiles if p not in _VECTORS]
        if missing:
            for p, v in zip(missing, router.embed(missing), strict=True):
                _VECTORS[p] = v
        vec = router.embed([text])[0]
        sims = [float(_VECTORS[p] @ vec) for p in profiles]
        threshold = router.update_similarity
    else:
        sims = [updates.lexical_subject(text, subject_profile(root, a)) for a in items]
        threshold = updates.LEXICAL_SUBJECT
    best = max(range(len(items)), key=lambda i: sims[i])
    if sims[best] >= threshold:
        return items[best], sims[best]
    return None, sims[best]


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
            '"article": <markdown document>}]}',
        },
        "items": items,
        "quarantine": quarantined,
        "skipped": skipped,
    }


def validate_apply(
    root: Path,
    program: Program,
    harness: Harness,
    data: Any,
    *,
    check_file: Callable[[str, str], object] | None = None,
) -> list[tuple[str, WriteRequest, str]]:
    """Check every returned article; InvalidInput lists every reason (nothing is filed).

    ``check_file(path, text)`` (Store.check_document) raises for an article no write would
    accept (a lone surrogate, a NUL byte, over the size limit): refused here with the rest,
    not discovered while the articles are being written.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("articles"), list):
        raise InvalidInput('an apply packet must be a JSON object {"articles": [...]}')
    pending = {s.path: s for s in unseen_sources(root)}
    cache: dict[str, list[wiki.Article]] = {}
    problems: list[str] = []
    accepted: list[tuple[str, WriteRequest, str]] = []
    taken: set[str] = set()
    filed: set[str] = set()  # sources: one article each
    for n, item in enumerate(data["articles"], start=1):
        where = f"articles[{n}]"
        if not isinstance(item, Mapping):
            problems.append(f"{where}: not an object")
            continue
        src = pending.get(str(item.get("source", "")))
        bundle = item.get("bundle")
        text = item.get("article")
        if src is None:
            problems.append(f"{where}: source {item.get('source')!r} is not an unseen inbox source")
            continue
        if src.unreadable:
            problems.append(f"{where}: {src.unreadable}")
            continue
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
    if problems:
        raise InvalidInput("refused, nothing filed:\n  " + "\n  ".join(problems))
    return accepted


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
