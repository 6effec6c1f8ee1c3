"""Experience: episodes, lessons, distillation and the snapshot (pure rules, no storage).

- An experience episode has ``kind`` operational | life | signal and the sections Situation,
  Actions, Outcome, Insights; each list item of ``## Insights`` is an insight.
- Insights that say the same thing merge into one lesson, which cites every episode that
  supports it: the same set of content terms always, and other words with the same meaning
  when a :class:`Likeness` says so (cosine of the offline embedder's vectors, or, with
  embeddings off, the overlap of content terms; thresholds calibrated in bench/lessons.py).
- Distillation: a lesson supported by two or more episodes whose oldest is older than the
  distillation age stamps those episodes ``distilled: true``, except the newest, kept live as
  the worked example. Distilled episodes leave active recall and stay on disk.
- The snapshot holds the identity, the strongest lessons, about five recent one-line
  episodes and the open decisions (live episodes tagged ``decision``), and never exceeds the
  token cap: it is built from fixed-size selections, then trimmed item by item if needed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..doc import frontmatter
from ..records import field, recordclass
from .harness import body_sections, claims
from .terms import term_set

KINDS = ("operational", "life", "signal")
OUTCOMES = ("success", "partial", "failure")
SECTIONS = ("Situation", "Actions", "Outcome", "Insights")


def now_utc() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().replace("Z", "+00:00")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@recordclass(frozen=True)
class Episode:
    path: str
    episode_id: str
    kind: str
    timestamp: datetime
    situation: str
    outcome: str
    insights: tuple[str, ...]
    tags: tuple[str, ...] = ()
    distilled: bool = False


def render_episode(
    *,
    episode_id: str,
    kind: str,
    at: datetime,
    situation: str,
    intent: str,
    actions: Sequence[str],
    outcome: str,
    insights: Sequence[str],
    tags: Sequence[str] = (),
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The markdown of an experience episode."""
    fm: dict[str, Any] = {
        "episode_id": episode_id,
        "memory_kind": "episodic",
        "type": "episode",
        "kind": kind,
        "timestamp": rfc3339(at),
        "situation": " ".join(situation.split()),
        "intent": " ".join(intent.split()),
        "outcome": outcome,
        "tags": list(tags),
        "distilled": False,
    }
    if extra:
        fm.update(extra)
    lines = [f"# {kind.capitalize()} episode {episode_id}", "", "## Situation", "", situation]
    lines += ["", "## Actions", ""] + [f"- {a}" for a in actions or ["(none)"]]
    lines += ["", "## Outcome", "", outcome]
    lines += ["", "## Insights", ""] + [f"- {i}" for i in insights or ["(none)"]]
    return frontmatter.render(fm, "\n".join(lines) + "\n")


def read_episode(path: str, text: str) -> tuple[Episode | None, list[str]]:
    """An episode and its integrity problems (the episode is None when unusable)."""
    parsed = frontmatter.parse(text)
    fm = parsed.fm
    problems: list[str] = []
    if parsed.error:
        return None, [f"invalid frontmatter: {parsed.error}"]
    eid = fm.get("episode_id")
    if not isinstance(eid, str) or not eid.strip():
        problems.append("missing episode_id")
    kind = fm.get("kind")
    if kind not in KINDS:
        problems.append(f"kind must be one of {', '.join(KINDS)}")
    moment = parse_time(fm.get("timestamp"))
    if moment is None:
        problems.append("timestamp is not RFC 3339")
    sections = body_sections(parsed.body)
    problems += [f"missing section '## {s}'" for s in SECTIONS if s.lower() not in sections]
    if problems:
        return None, problems
    insights = tuple(i for i in claims(sections.get("insights", "")) if i and i not in ("(none)",))
    tags = fm.get("tags") if isinstance(fm.get("tags"), list) else []
    return (
        Episode(
            path=path,
            episode_id=str(eid).strip(),
            kind=str(kind),
            timestamp=moment or now_utc(),
            situation=str(fm.get("situation") or "").strip(),
            outcome=str(fm.get("outcome") or "").strip(),
            insights=insights,
            tags=tuple(str(t) for t in tags or []),
            distilled=fm.get("distilled") is True,
        ),
        [],
    )


@recordclass
class Lesson:
    key: str
    text: str
    episodes: list[Episode] = field(default_factory=list)

    @property
    def lesson_id(self) -> str:
        return "lesson-" + hashlib.sha256(self.key.encode()).hexdigest()[:8]

    @property
    def newest(self) -> Episode:
        return max(self.episodes, key=lambda e: (e.timestamp, e.episode_id))

    @property
    def oldest(self) -> Episode:
        return min(self.episodes, key=lambda e: (e.timestamp, e.episode_id))


def insight_key(text: str) -> str:
    return " ".join(sorted(term_set(text))) or " ".join(text.lower().split())


# Calibrated by bench/lessons.py on the "calibrate" pairs of bench/data/lessons/pairs.json
# (the "check" pairs are kept aside to test them); docs/engine.md has the figures.
MEANING_THRESHOLD = 0.43  # cosine of two MiniLM vectors
WORDS_THRESHOLD = 0.13  # Jaccard overlap of two insights' content terms


@recordclass(frozen=True)
class Likeness:
    """How alike insights are: ``pairwise(texts)`` is the square matrix of similarities and
    two insights say the same thing at ``threshold`` or above. ``name`` says which."""

    name: str
    threshold: float
    pairwise: Callable[[Sequence[str]], Sequence[Sequence[float]]]


def word_overlap(texts: Sequence[str]) -> list[list[float]]:
    """Jaccard overlap of the content terms (stemmed, stopwords dropped) of each pair."""
    sets = [term_set(t) for t in texts]
    return [[len(a & b) / len(a | b) if a | b else 0.0 for b in sets] for a in sets]


WORDS = Likeness("words", WORDS_THRESHOLD, word_overlap)


def by_meaning(embed: Callable[[Sequence[str]], Any]) -> Likeness:
    """Cosine similarity of ``embed``'s L2-normalised rows (one per text)."""

    def pairwise(texts: Sequence[str]) -> Any:
        matrix = embed(list(texts))
        return (matrix @ matrix.T).tolist()

    return Likeness("meaning", MEANING_THRESHOLD, pairwise)


def _named(text: str, names: Iterable[str]) -> frozenset[str]:
    lowered = text.lower()
    return frozenset(n for n in names if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", lowered))


def lessons_from(
    episodes: Iterable[Episode],
    likeness: Likeness | None = None,
    names: Iterable[str] = (),
) -> list[Lesson]:
    """Merge the insights of all episodes (distilled ones included: they still support).

    Insights with the same content terms are one lesson. With ``likeness``, an insight whose
    similarity to a lesson's first insight reaches the threshold joins the most similar
    such lesson: the oldest wording names the lesson, so its id stays as episodes arrive.
    Two insights that name different ``names`` (the bundles: "widen kitchen" and "widen
    garden" read alike and are two lessons) never merge by likeness.
    """
    names = tuple(n.lower() for n in names)
    ordered = sorted(episodes, key=lambda e: (e.timestamp, e.episode_id))
    texts: dict[str, str] = {}
    for episode in ordered:
        for insight in episode.insights:
            texts.setdefault(insight_key(insight), " ".join(insight.split()))
    keys = list(texts)
    home = {k: k for k in keys}
    if likeness is not None and len(keys) > 1:
        sims = likeness.pairwise([texts[k] for k in keys])
        heads: list[int] = []
        for i in range(len(keys)):
            mine = _named(texts[keys[i]], names)
            near = [
                (sims[i][h], -h)
                for h in heads
                if sims[i][h] >= likeness.threshold and _named(texts[keys[h]], names) == mine
            ]
            if near:
                home[keys[i]] = keys[-max(near)[1]]
            else:
                heads.append(i)
    found: dict[str, Lesson] = {}
    for episode in ordered:
        seen: set[str] = set()
        for insight in episode.insights:
            key = home[insight_key(insight)]
            if key in seen:
                continue
            seen.add(key)
            lesson = found.setdefault(key, Lesson(key, texts[key]))
            lesson.episodes.append(episode)
    return sorted(
        found.values(),
        key=lambda lesson: (
            -len(lesson.episodes),
            -lesson.newest.timestamp.timestamp(),
            lesson.key,
        ),
    )


def to_distill(lessons: Iterable[Lesson], now: datetime, age_days: int) -> list[Episode]:
    """The episodes distillation stamps ``distilled: true`` (see the module docstring)."""
    age = timedelta(days=age_days)
    out: dict[str, Episode] = {}
    for lesson in lessons:
        if len(lesson.episodes) < 2:
            continue
        if now - lesson.oldest.timestamp <= age:
            continue
        keep = lesson.newest
        for episode in lesson.episodes:
            if episode is not keep and not episode.distilled:
                out[episode.path] = episode
    # an episode kept live as the newest example of one lesson stays live
    live = {lesson.newest.path for lesson in lessons if len(lesson.episodes) >= 2}
    return [e for p, e in sorted(out.items()) if p not in live]


def render_lessons(
    lessons: Sequence[Lesson],
    max_citations: int = 8,
    merged_from: Sequence[Mapping[str, Any]] = (),
) -> str:
    """LESSONS.md: each lesson with its support and links to its episodes; ``merged_from``
    names the episodes reflection distilled into it (so the memory report counts them)."""
    fm: dict[str, Any] = {"type": "lessons", "memory_kind": "semantic", "title": "Lessons"}
    if merged_from:
        fm["merged-from"] = [dict(item) for item in merged_from]
    lines = ["# Lessons", ""]
    if not lessons:
        lines.append("No lessons yet: `memdir reflect` merges the insights of episodes here.")
    for lesson in lessons:
        eps = sorted(lesson.episodes, key=lambda e: (e.timestamp, e.episode_id), reverse=True)
        cites = ", ".join(f"[{e.episode_id}]({e.path})" for e in eps[:max_citations])
        more = f" and {len(eps) - max_citations} more" if len(eps) > max_citations else ""
        lines.append(
            f"- **{lesson.text}** ({lesson.lesson_id}; {len(eps)} episodes: {cites}{more})"
        )
    return frontmatter.render(fm, "\n".join(lines) + "\n")


# ---- the snapshot ------------------------------------------------------------------------


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


def _distinct_recent(recent: Sequence[Episode], limit: int) -> list[str]:
    """One line per distinct situation, newest first: ten runs that did the same thing are
    one line with their count, so the lines left say different things."""
    lines: list[str] = []
    seen: dict[tuple[str, str, str], int] = {}
    for e in recent:
        key = (e.kind, " ".join(e.situation.split()).lower(), e.outcome)
        if key in seen:
            seen[key] += 1
            continue
        if len(seen) == limit:
            continue  # counting the repeats of lines already taken
        seen[key] = 1
        lines.append(f"{e.timestamp.strftime('%Y-%m-%d')} {e.kind}: {_clip(e.situation, 120)}")
    counts = list(seen.values())
    return [
        f"- {line} ({outcome}{f', {n} times' if n > 1 else ''})"
        for line, n, outcome in zip(lines, counts, (k[2] for k in seen), strict=True)
    ]


def render_snapshot(
    *,
    identity: str,
    lessons: Sequence[Lesson],
    recent: Sequence[Episode],
    decisions: Sequence[Episode],
    cap: int,
    count: Callable[[str], int],
    max_lessons: int = 10,
    max_recent: int = 5,
    max_decisions: int = 3,
) -> str:
    """SNAPSHOT.md within ``cap`` tokens, as counted by ``count``."""
    parts: dict[str, list[str]] = {
        "lessons": [f"- {_clip(lesson.text)}" for lesson in lessons[:max_lessons]],
        "recent": _distinct_recent(recent, max_recent),
        "decisions": [f"- {_clip(e.situation, 120)}" for e in decisions[:max_decisions]],
    }
    ident = _clip(identity, 600)

    def build() -> str:
        lines = ["# Snapshot", "", ident or "(no identity in PROGRAM.md)", ""]
        for title, key in (
            ("Lessons", "lessons"),
            ("Recent", "recent"),
            ("Open decisions", "decisions"),
        ):
            lines += [f"## {title}", ""] + (parts[key] or ["- (none)"]) + [""]
        return "\n".join(lines)

    text = build()
    order = ("lessons", "recent", "decisions")
    while count(text) > cap:
        longest = max(order, key=lambda k: len(parts[k]))
        if parts[longest]:
            parts[longest].pop()
        elif len(ident) > 40:
            ident = _clip(ident, max(40, len(ident) // 2))
        else:
            while text and count(text) > cap:  # only reachable with a tiny cap
                text = text[: len(text) * 3 // 4]
            break
        text = build()
    return text
