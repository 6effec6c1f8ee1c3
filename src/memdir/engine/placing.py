"""Where a source goes: the inbox sources still to consolidate (unmerged, or edited since
they were merged), their routes (by meaning when the embedder is there, else by words), the
placement record ``consolidate --json`` lists, and the article a source updates."""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from ..doc import frontmatter, paths
from ..index import routevectors as vectorcache
from ..kiwi import report as coverage
from ..records import recordclass
from . import meaning, routing, spread, updates, wiki
from .files import markdown_under
from .harness import FOOTNOTE_DEF, FOOTNOTE_REF, body_sections, claims
from .program import Bundle, Program
from .terms import sentences as split_sentences
from .terms import slugify
from .writer import SourceDoc, source_title


@recordclass
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


@recordclass(frozen=True)
class Router:
    """How a run routes: by meaning when ``embed`` is given, else by words (``why``).

    ``tuning`` picks the meaning router: :class:`~memdir.engine.spread.SpreadTuning` for
    label spreading (the default), :class:`~memdir.engine.meaning.Tuning` for the nearest-
    members router it replaced (``engine.router = "nearest"``)."""

    embed: meaning.Embed | None = None
    tuning: spread.SpreadTuning | meaning.Tuning = spread.SpreadTuning()
    why: str = "no embedder was given"
    update_similarity: float = 0.65
    claim_similarity: float = 0.55  # a claim said in other words updates the nearest one
    cue_similarity: float = 0.45  # ... when the new claim says that something changed

    def similarity(self, disk: vectorcache.VectorCache | None = None) -> updates.Similarity | None:
        """The cosines of texts with one text by the embedder (vectors kept in ``disk``
        when given), or None without one."""
        embed = self.embed
        if embed is None:
            return None

        def cosines(texts: Sequence[str], text: str) -> list[float]:
            *vectors, vec = meaning.cached(embed, [*texts, text], disk)
            return [float(v @ vec) for v in vectors]

        return cosines

    @property
    def method(self) -> str:
        return "meaning" if self.embed is not None else "lexical"

    def by_meaning(
        self, root: Path, bundles: Sequence[Bundle], items: Sequence[tuple[str, str]]
    ) -> dict[str, routing.Route]:
        """The route of every ``(key, text)``, all together, against the bundles' scopes and
        the articles they hold (their vectors kept in the store's cache)."""
        if self.embed is None:
            raise ValueError("routing by meaning needs an embedder")
        members = {
            b.name: [article_profile(a) for a in wiki.articles(root, b.name)] for b in bundles
        }
        disk = vectorcache.for_store(root)
        try:
            if isinstance(self.tuning, meaning.Tuning):
                return meaning.route_all(self.embed, bundles, items, members, self.tuning, disk)
            return spread.route_all(self.embed, bundles, items, members, self.tuning, disk)
        finally:
            disk.close()


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
    tuning: spread.SpreadTuning | meaning.Tuning
    if e.router == "nearest":
        tuning = meaning.Tuning()  # the router of before, with the calibration it had
    else:
        tuning = spread.SpreadTuning(
            e.route_margin,
            e.route_second,
            e.route_neighbours,
            e.route_scope_weight,
            e.route_second_words,
        )
    return Router(
        embed,
        tuning,
        why,
        e.update_similarity,
        e.update_claim_similarity,
        e.update_cue_similarity,
    )


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
    """The text of an article the meaning router compares sources with: its title,
    description and body without citations. A citation names the source's id, which is
    random, so with it two stores of the same notes embedded different texts and routed
    and updated differently."""
    return f"{article.title}\n{article.description}\n{uncited(article.body)[:1500]}"


def uncited(text: str) -> str:
    """``text`` without footnote definitions and footnote references."""
    return FOOTNOTE_REF.sub("", FOOTNOTE_DEF.sub("", text)).strip()


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
        routes.update(
            router.by_meaning(root, program.bundles, [(s.path, _route_text(s)) for s in todo])
        )
    return routes


def placement(src: Source, route: routing.Route) -> dict[str, Any]:
    """The record of where a source went and why (``consolidate --json``, ``placements``)."""
    out: dict[str, Any] = {"source": src.path, "router": route.method}
    out["bundles"] = list(route.bundles)
    out["scores"] = dict(route.scores)
    for key in ("meaning", "lexical", "background", "judge"):
        if key in route.details:
            out[key] = route.details[key]
    if route.reason:
        out["reason"] = route.reason
    out["placed"] = []
    return out


def with_entries(text: str, source: dict[str, Any], merge: dict[str, Any]) -> str:
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


def subject_article(
    root: Path, src: Source, bundle: str, items: list[wiki.Article], router: Router | None
) -> tuple[wiki.Article | None, float]:
    """The article of ``bundle`` this source is about (an update), and the similarity.

    An edited source goes back to the article that merged it. Otherwise the nearest
    article by meaning (``update_similarity``) or, without the embedder, by shared terms
    (:data:`memdir.engine.updates.LEXICAL_SUBJECT`)."""
    if src.edited_of:
        match = next((a for a in items if a.path == src.edited_of), None)
        return match, 1.0
    # Only an article with the frontmatter of one can take claims: a page a person wrote
    # into the bundle without it (no ``type``) is left as it is, the source gets its own.
    items = [a for a in items if a.error is None and isinstance(a.fm.get("type"), str)]
    if not items:
        return None, 0.0
    text = _route_text(src)
    if router is not None and router.embed is not None:
        profiles = [subject_profile(root, a) for a in items]
        disk = vectorcache.for_store(root)
        try:
            *vectors, vec = meaning.cached(router.embed, [*profiles, text], disk)
        finally:
            disk.close()
        sims = [float(v @ vec) for v in vectors]
        threshold = router.update_similarity
    else:
        sims = [updates.lexical_subject(text, subject_profile(root, a)) for a in items]
        threshold = updates.LEXICAL_SUBJECT
    best = max(range(len(items)), key=lambda i: sims[i])
    if sims[best] >= threshold:
        return items[best], sims[best]
    changed = _changed_claim(root, src, items, sims, router)
    if changed is not None:
        return items[changed], sims[changed]
    return None, sims[best]


#: An article at least this close to a source (cosine) is updated by it when one of the
#: source's sentences changes the value of one of its claims (``claim_similarity``).
RELATED = 0.45


def _changed_claim(
    root: Path, src: Source, items: list[wiki.Article], sims: list[float], router: Router | None
) -> int | None:
    """The index of the related article (:data:`RELATED`) one of whose claims a sentence of
    the source restates with another value of the same kind, by meaning; None if none."""
    if router is None or router.embed is None:
        return None
    sentences = [s for s in split_sentences(src.body) if updates.values(s)]
    best: tuple[float, int] | None = None
    disk = vectorcache.for_store(root)
    try:
        similarity = router.similarity(disk)
        if similarity is None:
            return None
        for i, article in enumerate(items):
            if sims[i] < RELATED:
                continue
            # The article as parsed at the start of the run, or as this run last wrote it.
            section = body_sections(article.body).get("key points", "")
            stated = [uncited(c) for c in claims(section) if updates.values(c)]
            for sentence in sentences if stated else []:
                floor = updates.claim_floor(
                    sentence, router.claim_similarity, router.cue_similarity
                )
                for claim, cos in zip(stated, similarity(stated, sentence), strict=True):
                    better = best is None or cos > best[0]
                    if cos >= floor and better and updates.changed_value(claim, sentence):
                        best = (cos, i)
    finally:
        disk.close()
    return best[1] if best is not None else None
