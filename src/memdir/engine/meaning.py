"""Routing by meaning: the offline embedder compares each source with every bundle's profile
(its scope, the articles already in it and the sources this run has filed there) and with a
shipped background of everyday sentences, fused with the lexical score of :mod:`.routing`.

A bundle's evidence for a source is ``max(cos(source, scope), members)``, where ``members`` is
the mean cosine of the source with the ``neighbours`` nearest texts the bundle already holds,
plus ``lexical_weight`` times the lexical share of scope words. (A centroid of the members
was tried first: the mean of many notes is close to any personal note, so it grows with the
bundle and lets everyday text in; the nearest members do not drift that way.)
The background score is the source's best cosine with the background sentences; a sentence
the bundles claim (its own evidence, scope or nearest members, reaches
``BACKGROUND_SCOPE_CUT``) is left out, so a bundle about walking the dog is not argued away
by a background sentence about a walk in the park. A source fits when its best evidence beats
the background by at least ``margin``: a one-sentence scope gives low cosines even to notes
that belong to it, but everyday text about nothing in particular is closer still to the
background, so the comparison is relative, not an absolute threshold.

Sources are routed most confident first, and each one filed joins its bundle's members, so a
paraphrase that shares no word with the scope can still be recognised through the notes filed
before it. A second bundle is added only when its evidence is within ``second`` of the first
and also beats the background. The settings and their calibration: docs/engine.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..index.routevectors import VectorCache
from ..records import recordclass
from .program import Bundle
from .routing import Route
from .routing import score as lexical_score
from .terms import term_set

BACKGROUND_FILE = Path(__file__).parent / "data" / "background.txt"
#: Background sentences at least this close to a scope are left out (see the docstring).
BACKGROUND_SCOPE_CUT = 0.4

Embed = Callable[[Sequence[str]], Any]
"""Texts -> an L2-normalised float32 matrix, one row per text (``Embedder.embed``)."""


@recordclass(frozen=True)
class Tuning:
    margin: float = 0.0  # best evidence minus background needed to file
    second: float = 0.05  # a second bundle within this much of the first
    lexical_weight: float = 0.3  # weight of the lexical share of scope words
    neighbours: int = 3  # a bundle's member evidence: mean cosine of its k nearest members


@lru_cache(maxsize=1)
def background() -> tuple[str, ...]:
    """The shipped background sentences (comments and blank lines dropped)."""
    lines = BACKGROUND_FILE.read_text(encoding="utf-8").splitlines()
    return tuple(s.strip() for s in lines if s.strip() and not s.startswith("#"))


_MEMBERS: dict[tuple[str, str], Any] = {}  # (model id, text) -> vector, within one process


def cached(embed: Embed, texts: Sequence[str], disk: VectorCache | None = None) -> list[Any]:
    """The vectors of ``texts``, embedding only those neither this process nor ``disk`` (the
    vectors earlier runs stored) holds; what is embedded here is stored in ``disk``."""
    key = getattr(getattr(embed, "__self__", None), "model_id", "")
    if not isinstance(key, str) or not key:
        return list(embed(list(texts)))  # no model id to key a cache by
    missing = list(dict.fromkeys(t for t in texts if (key, t) not in _MEMBERS))
    if missing:
        if len(_MEMBERS) > 200_000:
            _MEMBERS.clear()
        found = disk.get(key, missing) if disk is not None else {}
        for text, vector in found.items():
            _MEMBERS[(key, text)] = vector
        todo = [t for t in missing if (key, t) not in _MEMBERS]
        if todo:
            fresh = list(zip(todo, embed(todo), strict=True))
            for text, vector in fresh:
                _MEMBERS[(key, text)] = vector
            if disk is not None:
                disk.put(key, fresh)
    return [_MEMBERS[(key, t)] for t in texts]


def lexical_scores(
    bundles: Sequence[Bundle], items: Sequence[tuple[str, str]]
) -> tuple[Any, list[dict[str, tuple[str, ...]]]]:
    """Per item, the lexical share of each bundle's scope words (items x bundles) and the
    scope words it matched, by bundle name."""
    import numpy as np

    lexical = np.zeros((len(items), len(bundles)))
    matched: list[dict[str, tuple[str, ...]]] = []
    for i, (_, text) in enumerate(items):
        words = term_set(text)
        found: dict[str, tuple[str, ...]] = {}
        for j, b in enumerate(bundles):
            lexical[i, j], found[b.name] = lexical_score(b.scope, words)
        matched.append(found)
    return lexical, matched


def nothing_to_compare(
    bundles: Sequence[Bundle], items: Sequence[tuple[str, str]]
) -> dict[str, Route] | None:
    """The routes when no source or no bundle is given; None when there is work to do."""
    if not items:
        return {}
    if not bundles:
        return {k: Route((), {}, {}, "no bundles are defined in PROGRAM.md") for k, _ in items}
    return None


def route_details(
    names: Sequence[str], meaning: Sequence[float], lexical: Sequence[float], background: float
) -> dict[str, Any]:
    """What a placement records of a routing by meaning: per bundle, the source's cosine
    and lexical score, and the everyday background's score."""
    return {
        "method": "meaning",
        "meaning": {n: round(float(meaning[j]), 3) for j, n in enumerate(names)},
        "lexical": {n: round(float(lexical[j]), 3) for j, n in enumerate(names)},
        "background": round(background, 3),
    }


def route_all(
    embed: Embed,
    bundles: Sequence[Bundle],
    items: Sequence[tuple[str, str]],
    members: Mapping[str, Sequence[str]],
    tuning: Tuning,
    disk: VectorCache | None = None,
) -> dict[str, Route]:
    """Where each ``(key, text)`` goes; ``members`` are the texts each bundle holds already
    (their vectors, the scopes' and the background's come from ``disk`` when an earlier run
    stored them there)."""
    import numpy as np

    out: dict[str, Route] = {}
    trivial = nothing_to_compare(bundles, items)
    if trivial is not None:
        return trivial
    names = [b.name for b in bundles]
    scopes = np.array(cached(embed, [b.scope for b in bundles], disk))
    vectors = np.array(cached(embed, [text for _, text in items], disk))
    back = np.array(cached(embed, list(background()), disk))
    back_sim = back @ vectors.T  # background sentence x source
    back_scope = back @ scopes.T
    back_member = np.full((len(back), len(bundles)), -1.0)

    def background_scores() -> Any:
        # A background sentence the bundles claim (scope or nearest members as close as
        # BACKGROUND_SCOPE_CUT) is not "nothing in particular" for this memory: left out.
        claimed = np.maximum(back_scope, back_member).max(axis=1) >= BACKGROUND_SCOPE_CUT
        kept = back_sim[~claimed]
        return kept.max(axis=0) if len(kept) else np.zeros(len(items))

    lexical, matched = lexical_scores(bundles, items)
    held: list[list[Any]] = [[] for _ in bundles]  # the vectors each bundle holds
    for j, name in enumerate(names):
        texts = [t for t in members.get(name, ()) if t.strip()]
        if texts:
            held[j] = cached(embed, texts, disk)
    scope_sim = vectors @ scopes.T
    member_sim = np.full((len(items), len(bundles)), -1.0)

    def refresh(j: int) -> None:  # the column of bundle j, after it took a source
        if held[j]:
            sims = vectors @ np.array(held[j]).T
            top = -np.sort(-sims, axis=1)[:, : tuning.neighbours]
            member_sim[:, j] = top.mean(axis=1)
            near = back @ np.array(held[j]).T
            back_member[:, j] = (-np.sort(-near, axis=1)[:, : tuning.neighbours]).mean(axis=1)

    for j in range(len(bundles)):
        refresh(j)

    def evidence() -> Any:
        meaning = np.maximum(scope_sim, member_sim)
        return meaning, meaning + tuning.lexical_weight * lexical

    pending = list(range(len(items)))
    while pending:
        meaning, fused = evidence()
        bg = background_scores()
        margins = fused[pending].max(axis=1) - bg[pending]
        pick = int(np.argmax(margins))
        i = pending[pick]
        order = np.argsort(-fused[i], kind="stable")
        details = route_details(names, meaning[i], lexical[i], float(bg[i]))
        scores = {n: round(float(fused[i, j]), 3) for j, n in enumerate(names)}
        if margins[pick] < tuning.margin:
            break  # the most confident source left does not fit: neither do the others
        chosen = [int(order[0])]
        if len(order) > 1:
            j2 = int(order[1])
            if fused[i, j2] >= fused[i, order[0]] - tuning.second and (
                fused[i, j2] - bg[i] >= tuning.margin
            ):
                chosen.append(j2)
        for j in chosen:
            held[j].append(vectors[i])
            refresh(j)
        key = items[i][0]
        out[key] = Route(
            tuple(names[j] for j in chosen),
            scores,
            matched[i],
            "",
            method="meaning",
            details=details,
        )
        pending.pop(pick)
    meaning, fused = evidence()
    bg = background_scores()
    for i in pending:
        j = int(np.argmax(fused[i]))
        details = {
            "method": "meaning",
            "meaning": {n: round(float(meaning[i, k]), 3) for k, n in enumerate(names)},
            "lexical": {n: round(float(lexical[i, k]), 3) for k, n in enumerate(names)},
            "background": round(float(bg[i]), 3),
        }
        reason = (
            f"no bundle fits by meaning: best was '{names[j]}' at {fused[i, j]:.2f}, not above "
            f"the everyday background {bg[i]:.2f} by the margin {tuning.margin:.2f}"
        )
        scores = {n: round(float(fused[i, k]), 3) for k, n in enumerate(names)}
        out[items[i][0]] = Route((), scores, matched[i], reason, method="meaning", details=details)
    return out


def embedder_for(settings: Any, *, purpose: str = "routing") -> tuple[Embed | None, str]:
    """The embedding function routing (or query) uses, or None and why words alone are."""
    from ..errors import MemdirError

    if purpose == "routing" and settings.engine.router == "lexical":
        return None, "engine.router is 'lexical'"
    if not settings.embeddings.enabled:
        return None, "embeddings.enabled is false"
    try:
        from ..vectors.embedder import get_embedder

        embedder = get_embedder(settings.embeddings)
    except (MemdirError, ImportError, OSError) as exc:
        return None, f"the embedder cannot be loaded ({exc})"
    return embedder.embed, ""
