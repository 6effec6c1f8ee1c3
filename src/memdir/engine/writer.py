"""Article writers: the extractive default, the OpenAI-compatible model writer, and the
work packet (``--plan``) / validation (``--apply``) pair for an external agent.

A writer turns a :class:`WriteRequest` (one source routed to a bundle and topic, plus the
bundle's other articles) into a :class:`Draft`; :func:`render_article` turns every draft into
the same article shape, which is then checked against the harness. Writers are plugins
(``register_writers``); a factory takes the :class:`~memdir.settings.Settings`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..doc import frontmatter
from ..errors import ProviderError
from ..providers.openai import chat_with, json_reply
from ..providers.plugins import hookimpl
from ..records import field, recordclass
from . import okf
from .harness import Harness, validate_article
from .program import Budgets
from .terms import sentences, term_set, terms

EXTRACTIVE = "extractive"
MODEL = "openai"
_ADVICE = re.compile(
    r"\b(should|must|always|never|avoid|best|key|important|remember|prefer|keep|rule)\b", re.I
)


@recordclass(frozen=True)
class SourceDoc:
    id: str  # footnote key, unique inside the article
    resource: str  # store-relative path of the source
    episode_id: str
    title: str
    text: str  # body, frontmatter removed


@recordclass(frozen=True)
class RelatedArticle:
    path: str  # bundle-relative, "/topic/slug.md"
    title: str
    description: str


@recordclass(frozen=True)
class WriteRequest:
    bundle: str
    topic: str
    source: SourceDoc
    candidates: tuple[RelatedArticle, ...]
    budgets: Budgets
    harness: Harness
    recall: tuple[str, ...] = ()  # lessons and relevant past episodes, recalled first


@recordclass
class Draft:
    title: str
    description: str
    key_points: list[tuple[str, list[str]]]  # (sentence, source ids)
    takeaways: list[str]
    related: list[RelatedArticle]
    tags: list[str]
    by: str
    notes: list[str] = field(default_factory=list)


class Writer(Protocol):
    name: str

    def write(self, request: WriteRequest) -> Draft: ...


# ---- the extractive writer ---------------------------------------------------------------


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "\u2026"


def source_title(text: str, fm: Mapping[str, Any], fallback: str) -> str:
    title = fm.get("title")
    if isinstance(title, str) and title.strip():
        return " ".join(title.split())
    for line in text.splitlines():
        if line.startswith("# "):
            return " ".join(line[2:].split())
    first = sentences(text)
    if first:
        return _truncate(first[0].rstrip("."), 80)
    return fallback


def rank_related(
    text: str, candidates: Sequence[RelatedArticle], limit: int
) -> list[RelatedArticle]:
    """Articles of the bundle that share the most terms with ``text`` (at least two)."""
    mine = term_set(text)
    scored = []
    for n, cand in enumerate(candidates):
        overlap = len(mine & term_set(cand.title + " " + cand.description))
        if overlap >= 2:
            scored.append((-overlap, n, cand))
    return [c for _, _, c in sorted(scored)[:limit]]


class ExtractiveWriter:
    """Deterministic: picks the source's own sentences, so every claim is the source's words."""

    name = EXTRACTIVE

    def __init__(self, settings: Any = None) -> None:
        self.settings = settings

    def write(self, request: WriteRequest) -> Draft:
        src = request.source
        harness = request.harness
        all_sentences = [s for s in sentences(src.text) if len(s.split()) >= 4]
        if not all_sentences:
            all_sentences = sentences(src.text) or [src.title]
        weights = Counter(terms(src.text))
        title_terms = term_set(src.title)

        def weight(sentence: str) -> float:
            ts = terms(sentence)
            if not ts:
                return 0.0
            unique = set(ts)
            base: float = sum(weights[t] for t in unique) / len(unique) ** 0.5
            return base + 2.0 * len(title_terms & unique)

        ranked = sorted(range(len(all_sentences)), key=lambda i: (-weight(all_sentences[i]), i))
        chosen = sorted(ranked[: request.budgets.key_points])
        key_points = [(all_sentences[i], [src.id]) for i in chosen]
        rest = [s for i, s in enumerate(all_sentences) if i not in chosen and _ADVICE.search(s)]
        advice_in_points = [s for s, _ in key_points if _ADVICE.search(s)]
        takeaways = [f"{s} [^{src.id}]" for s in (rest + advice_in_points)]
        takeaways = takeaways[: request.budgets.takeaways]
        from .routing import surface_keywords

        tags = [word for _, word in surface_keywords(f"{src.title}\n{src.text}", limit=5)]
        if not takeaways:
            takeaways = ["Main terms: " + ", ".join(tags) + "."] if tags else []
        return Draft(
            title=_truncate(src.title, harness.title_max_chars),
            description=_truncate(all_sentences[0], harness.description_max_chars),
            key_points=key_points,
            takeaways=takeaways,
            related=rank_related(
                src.title + " " + src.text, request.candidates, request.budgets.related
            ),
            tags=tags,
            by="memdir/extractive",
        )


# ---- rendering ---------------------------------------------------------------------------


def relative_link(from_topic: str, bundle_path: str) -> str:
    """A link from an article in ``from_topic`` to a bundle-relative ``/topic/slug.md``."""
    return ("../" if from_topic else "") + bundle_path.lstrip("/")


def render_article(request: WriteRequest, draft: Draft, *, at: str, actor: str) -> str:
    """The article document for a draft: frontmatter, title, cited key points, takeaways,
    related articles and the footnote definitions."""
    src = request.source
    fm: dict[str, Any] = {
        "type": request.harness.article_type,
        "title": draft.title,
        "description": draft.description,
        "tags": draft.tags,
        "bundle": request.bundle,
        "topic": request.topic,
        "status": "draft",
        "sources": [{"id": src.id, "resource": src.resource, "title": src.title}],
        "generated": {"by": draft.by, "at": at},
        "related": [r.path for r in draft.related],
        "merged-from": [
            {
                "type": "ingest",
                "id": src.episode_id,
                "path": src.resource,
                "date": at,
                "actor": actor,
            }
        ],
    }
    lines = [f"# {draft.title}", "", "## Key points", ""]
    for sentence, ids in draft.key_points:
        lines.append(f"- {sentence} " + "".join(f"[^{i}]" for i in ids))
    lines += ["", "## Takeaways", ""]
    lines += [f"- {t}" for t in draft.takeaways] or ["- (none)"]
    lines += ["", "## Related", ""]
    if draft.related:
        lines += [
            f"- [{okf.link_text(r.title)}]({okf.url_for(relative_link(request.topic, r.path))})"
            + (f" - {r.description}" if r.description else "")
            for r in draft.related
        ]
    else:
        lines.append("- None yet in this bundle.")
    lines += ["", f"[^{src.id}]: {src.resource} ({src.title})", ""]
    return frontmatter.render(fm, "\n".join(lines))


def check(request: WriteRequest, text: str) -> list[str]:
    """Harness problems of a rendered or returned article, plus memdir's own filing rules."""
    parsed = frontmatter.parse(text)
    if not parsed.has_block:
        return ["the article has no frontmatter"]
    problems = validate_article(request.harness, parsed.fm, parsed.body, fm_error=parsed.error)
    if parsed.error:
        return problems
    if parsed.fm.get("bundle") not in (None, request.bundle):
        problems.append(f"bundle must be '{request.bundle}'")
    if parsed.fm.get("topic") not in (None, request.topic):
        problems.append(f"topic must be '{request.topic}' (where the article is filed)")
    sources = parsed.fm.get("sources")
    listed = sources if isinstance(sources, list) else []  # any other shape: a harness problem
    ids = [s.get("id") for s in listed if isinstance(s, Mapping)]
    if request.source.id not in ids:
        problems.append(f"sources must include id '{request.source.id}'")
    return problems


# ---- the model writer --------------------------------------------------------------------

_SYSTEM = """You write one article of a cited wiki from one source. Reply with one JSON object
and nothing else: {"title": str, "description": one sentence, "key_points": [{"text": a
sentence stating one fact from the source, "sources": [source ids]}], "takeaways": [str],
"tags": [str]}. Use only facts in the source. Every key point cites the source id given."""


#: Failures in a row after which the model writer stops asking for the rest of its run: a
#: service that is down would otherwise cost every source its timeout and retries.
GIVE_UP = 3


class ModelWriter:
    """Asks an OpenAI-compatible chat endpoint for the draft; falls back to the extractive
    writer (and says so in ``notes``) when the endpoint fails, times out or answers badly,
    and without asking once it failed ``GIVE_UP`` times in a row."""

    name = MODEL

    def __init__(self, settings: Any) -> None:
        self.llm = settings.llm
        self.fallback = ExtractiveWriter(settings)
        self.failed = 0  # failures in a row: after GIVE_UP, this writer stops asking

    def _ask(self, request: WriteRequest) -> Mapping[str, Any]:
        if not self.llm.base_url or not self.llm.model:
            raise ProviderError("[llm] base_url and model must be set for the model writer")
        budgets = request.budgets
        user = (
            f"Source id: {request.source.id}\nSource title: {request.source.title}\n"
            f"At most {budgets.key_points} key points and {budgets.takeaways} takeaways.\n\n"
            f"{request.source.text}"
        )
        if request.recall:
            user += "\n\nLessons and past experience to respect:\n" + "\n".join(
                f"- {line}" for line in request.recall
            )
        messages = [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]
        return json_reply("model writer", chat_with(self.llm, "model writer", messages))

    def write(self, request: WriteRequest) -> Draft:
        if self.failed >= GIVE_UP:
            draft = self.fallback.write(request)
            draft.notes.append(
                f"fallback to extractive: not asked, the model failed {GIVE_UP} times in a row"
            )
            return draft
        try:
            data = self._ask(request)
            draft = self._draft(request, data)
        except ProviderError as exc:
            self.failed += 1
            draft = self.fallback.write(request)
            draft.notes.append(f"fallback to extractive: {exc}")
            return draft
        self.failed = 0
        return draft

    def _draft(self, request: WriteRequest, data: Mapping[str, Any]) -> Draft:
        src = request.source
        h = request.harness
        points: list[tuple[str, list[str]]] = []
        for item in data.get("key_points") or []:
            if isinstance(item, Mapping) and isinstance(item.get("text"), str):
                text = " ".join(item["text"].split())
                if text:
                    points.append((text, [src.id]))
        if not points:
            raise ProviderError("model writer returned no key points")
        title = data.get("title") if isinstance(data.get("title"), str) else src.title
        description = data.get("description")
        if not isinstance(description, str) or not description.strip():
            description = points[0][0]
        takeaways = [" ".join(t.split()) for t in data.get("takeaways") or [] if isinstance(t, str)]
        tags = [str(t) for t in data.get("tags") or [] if isinstance(t, str | int)]
        return Draft(
            title=_truncate(" ".join(str(title).split()) or src.title, h.title_max_chars),
            description=_truncate(" ".join(description.split()), h.description_max_chars),
            key_points=points[: request.budgets.key_points],
            takeaways=takeaways[: request.budgets.takeaways],
            related=rank_related(
                src.title + " " + src.text, request.candidates, request.budgets.related
            ),
            tags=tags[:8],
            by=f"model/{self.llm.model}",
        )


@hookimpl
def register_writers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register(EXTRACTIVE, ExtractiveWriter)
    register(MODEL, ModelWriter)
