"""New material updates the wiki: a source about a subject an article already covers is merged
into that article instead of starting a second one.

What the deterministic path does (docs/engine.md, "Updates"):

- **same subject**: the source's nearest article in its bundle by meaning (cosine of the
  source with the article's title, description and claims) at or above ``update_similarity``;
  without the embedder, the share of the smaller term set the two have in common, at or above
  ``LEXICAL_SUBJECT``;
- **near-duplicate**: every claim of the new draft is already a claim of the article (same
  words, citations aside): the source is recorded as merged and cited, and nothing is added;
- **changed fact**: a new claim and an existing one are about one fact and carry different
  values of one kind (numbers, percentages, amounts, ratios, times, dates, versions, codes,
  quantities in one unit). About one fact: they share their subject words (at least two
  content terms, and a third of the smaller claim's), or, with the embedder, the two claims
  are at least ``claim_similarity`` apart by cosine (a change said in other words: "the
  carols evening has moved to 19 December" after "the winter concert is on 12 December").
  The claim of the older source moves
  to ``## Superseded`` with ``superseded by [^new] on DATE``, and the article's
  ``superseded`` list records ``{source, superseded_by, date, subject}``. The claim that
  superseded it leads the Key points (other new claims are appended) and the article's
  description becomes the newer source's, so the first value a reader meets is the current
  one.

What it does not do: a change said in words only ("we moved the router upstairs" after "the
router is in the hall"), a negation, a fact split over two sentences: those need the model
writer or the agent (``--plan``/``--apply``), which rewrite the article whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..doc import frontmatter
from ..records import recordclass
from .harness import FOOTNOTE_REF, body_sections, claims
from .terms import term_set

#: Two claims are about one fact when they share this share of the smaller claim's subject
#: terms (and at least two of them).
SHARED_SUBJECT = 0.34

#: Without the embedder: the term overlap (of the smaller set) that makes two texts one subject.
LEXICAL_SUBJECT = 0.6

_VALUE = re.compile(
    r"(?:\b(?:(?:mon|tues?|wednes|thurs?|fri|satur|sun)days?|tues|weds|thurs)\b)"  # weekdays
    r"|(?:\b[A-Za-z]{1,4}-?\d{3,}\b)"  # codes: a policy, a model number
    r"|(?:[£$€]\s?\d[\d,.]*(?:\s?[km]\b)?)"  # amounts
    r"|(?:\d+(?::\d+)+)"  # ratios and times, 1:1:1, 07:30
    r"|(?:\d+(?:[./-]\d+)+)"  # dates, versions, addresses
    r"|(?:\d+(?:\.\d+)?\s?%)"  # percentages
    r"|(?:\b\d+(?:\.\d+)?(?:\s?(?:am|pm|g|kg|ml|l|km|m|c|gb|mb|ghz|mbps|mins?|minutes|hours?|"
    r"days?|weeks?|months?|years?)\b)?)",
    re.IGNORECASE,
)
_MONTH = re.compile(
    r"\b(?:\d{1,2}\s+)?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*"
    r"(?:\s+\d{1,2})?(?:,?\s+\d{4})?\b",
    re.IGNORECASE,
)


def values(claim: str) -> frozenset[str]:
    """The values a claim states (normalised: lowercase, no spaces)."""
    text = FOOTNOTE_REF.sub("", claim)
    found = {m.group(0) for m in _VALUE.finditer(text)}
    found |= {m.group(0) for m in _MONTH.finditer(text) if any(c.isdigit() for c in m.group(0))}
    normal = (re.sub(r"\s+", "", v.lower()).rstrip(".,") for v in found if v.strip())
    return frozenset(_day(v) for v in normal)


def _day(value: str) -> str:
    """A weekday as its first three letters (``Tuesdays``, ``tues`` -> ``tue``), any other
    value as it is."""
    return value[:3] if _WEEKDAY.fullmatch(value) else value


def subject(claim: str) -> frozenset[str]:
    """A claim's content terms without its values."""
    text = _VALUE.sub(" ", FOOTNOTE_REF.sub("", claim))
    return frozenset(t for t in term_set(text) if not any(c.isdigit() for c in t))


_WEEKDAY = re.compile(r"(?:mon|tues?|wednes|thurs?|fri|satur|sun)days?|tues|weds|thurs")
_DAYS = frozenset({"mon", "tue", "wed", "thu", "fri", "sat", "sun"})
_MONTH_NAME = re.compile(r"jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec")
_QUANTITY = re.compile(r"[\d.,]+([a-z]+)")
_UNITS = {"min": "minutes", "mins": "minutes", "hour": "hours", "day": "days", "week": "weeks"}
_UNITS |= {"month": "months", "year": "years"}


def kind(value: str) -> str:
    """What a normalised value (:func:`values`) measures: ``money``, ``date``, ``time``,
    ``percent``, its unit (``g``, ``km``, ``days``...), ``number`` or ``code``."""
    if value[:1] in "£$€":
        return "money"
    if value.endswith("%"):
        return "percent"
    if value.endswith(("am", "pm")) or re.fullmatch(r"\d{1,2}:\d{2}", value):
        return "time"
    if re.fullmatch(r"\d+(?:[./-]\d+){2}", value) or _MONTH_NAME.search(value):
        return "date"
    if value in _DAYS:
        return "weekday"
    quantity = _QUANTITY.fullmatch(value)
    if quantity:
        return _UNITS.get(quantity.group(1), quantity.group(1))
    if re.fullmatch(r"[\d.,]+", value):
        return "number"
    return "code"


#: Words by which a sentence says that something changed: "is now", "moved to", "goes up
#: to", "from next week", "no longer", "switched", "instead"...
_CUE = re.compile(
    r"\b(?:now|no longer|any ?more|instead|moved|moving|changed?|switch(?:ed|ing)?|"
    r"pushed|put (?:it |us |me |them )?(?:up|down|back)|goes (?:up |down )?to|gone (?:up|down)|"
    r"went (?:up|down)|up to|down to|rose|raised|dropped|cut|upgraded|downgraded|stepped|"
    r"new|from (?:next|this|now|then)|has replaced|replaced|taken over|took over)\b",
    re.IGNORECASE,
)


def says_changed(sentence: str) -> bool:
    """Whether a sentence says in words that a value changed ("the test is now 9 April",
    "moved to Fridays", "goes up to £47"): the cue that lets a claim further away by
    meaning be the one it updates (``update_cue_similarity``)."""
    return bool(_CUE.search(FOOTNOTE_REF.sub("", sentence)))


def claim_floor(sentence: str, similarity: float, cue_similarity: float) -> float:
    """The cosine a claim needs with ``sentence`` to be the fact it restates: the lower
    ``cue_similarity`` when the sentence says that something changed."""
    return min(similarity, cue_similarity) if says_changed(sentence) else similarity


def changed_value(old: str, new: str) -> bool:
    """Whether ``new`` states a value of a kind ``old`` states too, and not the same one."""
    va, vb = values(old), values(new)
    if not va or not vb or va == vb or va <= vb:
        return False
    return bool({kind(v) for v in va - vb} & {kind(v) for v in vb - va})


def same_fact(old: str, new: str, similarity: float | None = None, floor: float = 1.0) -> bool:
    """Whether ``new`` restates the fact of ``old`` with another value (see the docstring):
    by shared subject words, or by ``similarity`` (their cosine) at or above ``floor``."""
    a, b = subject(old), subject(new)
    shared = a & b
    by_words = len(shared) >= 2 and len(shared) >= SHARED_SUBJECT * min(len(a), len(b))
    by_meaning = similarity is not None and similarity >= floor
    if not (by_words or by_meaning):
        return False
    va, vb = values(old), values(new)
    if by_words and va and vb and va != vb and not va <= vb:
        return True
    return changed_value(old, new)


def lexical_subject(a: str, b: str) -> float:
    ta, tb = term_set(a), term_set(b)
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / min(len(ta), len(tb))


def _plain(claim: str) -> str:
    return " ".join(FOOTNOTE_REF.sub("", claim).split()).lower().rstrip(".")


Similarity = Callable[[Sequence[str], str], Sequence[float]]
"""Texts and one text -> the cosine of each with it."""


@recordclass
class Merged:
    text: str
    action: str  # "updated" or "duplicate"
    added: int
    superseded: list[dict[str, str]]


def _date_of(entry: Mapping[str, Any]) -> str:
    return str(entry.get("date") or "")


def merge(
    article_text: str,
    *,
    source: Mapping[str, str],
    merged_from: Mapping[str, Any],
    key_points: Sequence[tuple[str, Sequence[str]]],
    description: str,
    at: str,
    actor: str,
    edited: bool = False,
    similarity: Similarity | None = None,
    claim_similarity: float = 1.0,
    cue_similarity: float = 1.0,
) -> Merged:
    """The article with a new source merged in.

    ``source`` is the new ``sources`` entry (``id``, ``resource``, ``title``, ``date``),
    ``merged_from`` its ``merged-from`` entry, ``key_points`` the new draft's cited claims.
    The newer of two conflicting claims is the one whose source is dated later (its
    ``date`` key, else when it was ingested); the other is superseded. ``edited``: the
    source is a new version of one the article cites, whose own claims it replaces.
    ``similarity`` (the cosines of claims with one claim, by the embedder) lets a claim
    said in other words supersede the one nearest it, at ``claim_similarity`` or above
    (``cue_similarity`` when the claim says that something changed: :func:`says_changed`).
    """
    parsed = frontmatter.parse(article_text)
    fm = dict(parsed.fm)
    sections = body_sections(parsed.body)
    current = claims(sections.get("key points", ""))
    dropped = 0
    if edited:
        mine = [c for c in current if FOOTNOTE_REF.findall(c) == [source["id"]]]
        keep = {_plain(s) for s, _ in key_points}
        dropped = sum(1 for c in mine if _plain(c) not in keep)
        current = [c for c in current if c not in mine or _plain(c) in keep]
    known = {_plain(c) for c in current}
    fresh = [(s, ids) for s, ids in key_points if _plain(s) not in known]
    listed = [s for s in fm.get("sources") or [] if isinstance(s, Mapping)]
    dates = {str(s.get("id")): _date_of(s) for s in listed}
    new_id = source["id"]
    new_date = source.get("date", "")
    kept: list[str] = list(current)
    moved: list[str] = []
    records: list[dict[str, str]] = []
    added: list[str] = []
    leading: list[str] = []  # claims that superseded one: the current value comes first
    for sentence, ids in fresh:
        line = f"{sentence} " + "".join(f"[^{i}]" for i in ids)
        conflicts = [c for c in kept if same_fact(c, sentence)]
        if similarity is not None and kept and not conflicts:
            sims = list(similarity([_plain(c) for c in kept], _plain(sentence)))
            best = max(range(len(kept)), key=lambda k: sims[k])
            floor = claim_floor(sentence, claim_similarity, cue_similarity)
            if same_fact(kept[best], sentence, sims[best], floor):
                conflicts = [kept[best]]
        older_new = False
        for old in conflicts:
            old_ids = FOOTNOTE_REF.findall(old)
            old_date = max((dates.get(i, "") for i in old_ids), default="")
            if new_date and old_date and new_date < old_date:
                older_new = True  # the incoming claim is the stale one
                moved.append(f"{line} (superseded by {' '.join(f'[^{i}]' for i in old_ids)})")
                records.append(_record(sentence, new_id, ",".join(old_ids), at))
                break
            kept.remove(old)
            moved.append(f"{old.rstrip()} (superseded by [^{new_id}] on {at[:10]})")
            records.append(_record(old, ",".join(old_ids), new_id, at))
        if not older_new:
            (leading if conflicts else added).append(line)
    action = "duplicate" if not (added or leading or moved or dropped) else "updated"
    fm["sources"] = [*(s for s in listed if str(s.get("id")) != new_id), dict(source)]
    history = fm.get("merged-from")
    fm["merged-from"] = [*(history if isinstance(history, list) else []), dict(merged_from)]
    if records:
        old_records = fm.get("superseded")
        fm["superseded"] = [*(old_records if isinstance(old_records, list) else []), *records]
        lead = FOOTNOTE_REF.sub("", leading[0]).strip() if leading else description
        if lead:
            fm["description"] = lead if len(lead) <= 160 else lead[:157].rsplit(" ", 1)[0] + "..."
    fm["updated"] = {"by": actor, "at": at}
    stale = {_plain(m.split(" (superseded by ")[0]) for m in moved}
    body = _render_body(parsed.body, leading + kept + added, moved, source, stale)
    return Merged(frontmatter.render(fm, body), action, len(leading) + len(added), records)


def _record(claim: str, source: str, by: str, at: str) -> dict[str, str]:
    words = " ".join(sorted(subject(claim)))[:120]
    return {"source": source, "superseded_by": by, "date": at, "subject": words}


def _render_body(
    body: str,
    key_points: list[str],
    moved: list[str],
    source: Mapping[str, str],
    stale: set[str],
) -> str:
    """The body with its Key points replaced, superseded claims listed under a last
    ``## Superseded`` section and the new source's footnote defined."""
    lines = body.rstrip("\n").splitlines()
    out: list[str] = []
    section = ""
    wrote_points = False
    old_superseded: list[str] = []
    footnotes: list[str] = []
    for line in lines:
        if line.startswith("## "):
            section = line[3:].strip().lower()
            if section == "superseded":
                continue
            out.append(line)
            if section == "key points":
                out.append("")
                out += [f"- {c.strip()}" for c in key_points]
                wrote_points = True
            continue
        if line.startswith("[^") and "]:" in line:
            footnotes.append(line)
            continue
        if section == "key points" and wrote_points:
            continue  # replaced above
        if section == "superseded":
            if line.startswith("- "):
                old_superseded.append(line[2:])
            continue
        if section == "takeaways" and line.startswith("- ") and _plain(line[2:]) in stale:
            continue  # a takeaway repeating a superseded claim goes with it
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    superseded = old_superseded + moved
    if superseded:
        out += ["", "## Superseded", ""] + [f"- {c}" for c in superseded]
    note = f"[^{source['id']}]: {source['resource']} ({source['title']})"
    if note not in footnotes:
        footnotes.append(note)
    return "\n".join(_spaced(out) + [""] + footnotes) + "\n"


def _spaced(lines: list[str]) -> list[str]:
    """A blank line before every heading and after it (as the writer renders)."""
    out: list[str] = []
    for line in lines:
        if line.startswith("#") and out and out[-1].strip():
            out.append("")
        if out and out[-1].startswith("#") and line.strip():
            out.append("")
        out.append(line)
    return out
