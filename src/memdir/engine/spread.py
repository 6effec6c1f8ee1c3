"""Routing by meaning: a random walk from each source over a graph of texts (the default).

The sources of one run, every bundle's scope, the articles the bundles already hold and a
shipped background of everyday texts (``data/background.txt``) are the nodes of a graph in
which each source is joined to its ``neighbours`` nearest texts by the offline embedder's
cosine (edge weight ``exp((cos - 1) / TEMPERATURE)``; an edge between two sources goes both
ways). Scopes, articles and background texts are labelled: a bundle's, or "nothing in
particular". A walk starts at a source and at each step follows one of the edges of the
text it is at, in proportion to their weights, until it reaches a labelled text; the share
of a label is the chance that the walk ends at one of its texts (an absorbing random walk,
solved exactly by iteration). A walk through other sources carries their evidence over, so
a note that shares no word and little meaning with a one-sentence scope is still filed
where the notes it resembles go, and a note about nothing in particular ends among the
everyday texts around it. A scope's edges weigh ``scope_weight`` times more: it is one text
against a background of hundreds, and it is what the person said the bundle is for.

A source is filed in the bundle with the largest share when that share beats the
background's by ``margin`` (a negative margin files a source the background takes a little
more of); a second bundle joins when its share beats the background's and is at least
``second`` times the first's, or whatever its share when the source uses at least
``second_words`` distinct words of its scope (one shared word is chance: a bread note that
says "water" is not about a garden whose scope says "watering"). The lexical share of scope words
(:func:`memdir.engine.routing.score`) is recorded with every route. Calibration:
docs/engine.md, "Routing".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..index.routevectors import VectorCache
from ..records import recordclass
from .meaning import (
    BACKGROUND_SCOPE_CUT,
    Embed,
    background,
    cached,
    lexical_scores,
    nothing_to_compare,
    route_details,
)
from .program import Bundle
from .routing import Route

TEMPERATURE = 0.1  # how fast an edge's weight falls with its cosine
STEPS = 200  # at most this many steps of the iteration (it stops once settled)
SETTLED = 1e-7  # the largest change of a share that counts as settled
MEMBER_LIMIT = 64  # per bundle, the articles nearest the sources that join the graph
CHUNK = 1024  # sources whose cosines with every text are computed at once


@recordclass(frozen=True)
class SpreadTuning:
    margin: float = -0.2  # the best bundle's share minus the background's, needed to file
    second: float = 0.6  # a second bundle with at least this fraction of the first's share
    neighbours: int = 12  # edges per source
    scope_weight: float = 10.0  # how much more a scope's edges weigh than another text's
    second_words: int = 2  # a second bundle joins when the source uses this many scope words


def absorbed(
    sources: Any, seeds: Any, seed_label: Any, labels: int, tuning: SpreadTuning, scope_seed: Any
) -> Any:
    """Per source, the chance a walk from it ends at a seed of each label (sources x labels).

    ``seeds`` are the labelled texts' vectors, ``seed_label`` their label (0..labels-1),
    ``scope_seed`` a mask of the seeds whose edges weigh ``scope_weight`` more."""
    import numpy as np

    n = len(sources)
    everything = np.vstack([sources, seeds])
    k = max(1, min(tuning.neighbours, len(everything) - 1))
    rows_l, cols_l, weights_l = [], [], []
    boost = np.concatenate([np.ones(n), np.where(scope_seed, tuning.scope_weight, 1.0)])
    for start in range(0, n, CHUNK):
        sims = sources[start : start + CHUNK] @ everything.T
        here = np.arange(len(sims))
        sims[here, here + start] = -np.inf  # not an edge to itself
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        cos = np.take_along_axis(sims, top, axis=1).astype(np.float64)
        rows_l.append(np.repeat(here + start, k))
        cols_l.append(top.ravel())
        weights_l.append((np.exp((cos - 1.0) / TEMPERATURE) * boost[top]).ravel())
    rows, cols, weights = (np.concatenate(x) for x in (rows_l, cols_l, weights_l))
    between = cols < n  # an edge between two sources goes both ways
    rows, cols = (
        np.concatenate([rows, cols[between]]),
        np.concatenate([cols, rows[between]]),
    )
    weights = np.concatenate([weights, weights[between]])
    degree = np.bincount(rows, weights, minlength=n)
    step = weights / degree[rows]
    to_seed = cols >= n
    direct = np.zeros((n, labels))
    np.add.at(direct, (rows[to_seed], seed_label[cols[to_seed] - n]), step[to_seed])
    inner_rows, inner_cols, inner_step = rows[~to_seed], cols[~to_seed], step[~to_seed]
    shares = direct.copy()
    for _ in range(STEPS):
        nxt = direct.copy()
        np.add.at(nxt, inner_rows, inner_step[:, None] * shares[inner_cols])
        settled = float(np.abs(nxt - shares).max()) < SETTLED
        shares = nxt
        if settled:
            break
    return shares


def route_all(
    embed: Embed,
    bundles: Sequence[Bundle],
    items: Sequence[tuple[str, str]],
    members: Mapping[str, Sequence[str]],
    tuning: SpreadTuning,
    disk: VectorCache | None = None,
) -> dict[str, Route]:
    """Where each ``(key, text)`` goes; ``members`` are the texts each bundle holds already."""
    import numpy as np

    out: dict[str, Route] = {}
    trivial = nothing_to_compare(bundles, items)
    if trivial is not None:
        return trivial
    names = [b.name for b in bundles]
    nb = len(bundles)
    sources = np.array(cached(embed, [text for _, text in items], disk))
    scopes = np.array(cached(embed, [b.scope for b in bundles], disk))
    back = np.array(cached(embed, list(background()), disk))
    # An everyday text a bundle claims (as close to its scope as BACKGROUND_SCOPE_CUT) is not
    # "nothing in particular" for this memory: a bundle about the kids' school is not
    # argued away by a background line about a school play.
    back = back[(back @ scopes.T).max(axis=1) < BACKGROUND_SCOPE_CUT]
    held: list[Any] = []
    held_label: list[int] = []
    for j, name in enumerate(names):
        texts = [t for t in members.get(name, ()) if t.strip()]
        if not texts:
            continue
        vecs = np.array(cached(embed, texts, disk))
        if len(vecs) > MEMBER_LIMIT:  # the articles nearest the sources stand for the rest
            nearest = (vecs @ sources.T).max(axis=1)
            vecs = vecs[np.argsort(-nearest, kind="stable")[:MEMBER_LIMIT]]
        held.extend(vecs)
        held_label.extend([j] * len(vecs))
    lexical, matched = lexical_scores(bundles, items)
    seeds = np.vstack([scopes, *([np.array(held)] if held else []), back]).astype(np.float32)
    seed_label = np.array([*range(nb), *held_label, *([nb] * len(back))])
    scope_seed = np.arange(len(seeds)) < nb
    shares = absorbed(sources.astype(np.float32), seeds, seed_label, nb + 1, tuning, scope_seed)
    scope_sim = sources @ scopes.T
    for i, (key, _) in enumerate(items):
        row = shares[i]
        order = np.argsort(-row[:nb], kind="stable")
        best, rest = int(order[0]), float(row[nb])
        scores = {n: round(float(row[j]), 3) for j, n in enumerate(names)}
        details = route_details(names, scope_sim[i], lexical[i], rest)
        if row[best] - rest < tuning.margin:
            reason = (
                f"no bundle fits by meaning: best was '{names[best]}' at {row[best]:.2f} of "
                f"the walks from this source, the everyday background at {rest:.2f} (a bundle "
                f"needs the background's share {tuning.margin:+.2f})"
            )
            out[key] = Route((), scores, matched[i], reason, method="meaning", details=details)
            continue
        chosen = [best]
        if nb > 1:
            j2 = int(order[1])
            # The walk gives a note about two subjects most to the one it resembles more; the
            # words of the other's scope are the evidence that it is about that one too.
            used = len(matched[i][names[j2]])
            worded = tuning.second_words > 0 and used >= tuning.second_words
            if (worded or row[j2] >= tuning.second * row[best]) and row[j2] > rest:
                chosen.append(j2)
        out[key] = Route(
            tuple(names[j] for j in chosen),
            scores,
            matched[i],
            "",
            method="meaning",
            details=details,
        )
    return out
