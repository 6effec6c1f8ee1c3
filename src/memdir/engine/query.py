"""query: tiered recall. Tier 0 the snapshot, tier 1 the index walk (top -> bundle -> topic ->
at most the budgeted article bodies), tier 2 search pointers read like tier-1 hits."""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..doc import frontmatter
from ..records import field, recordclass
from . import okf
from .files import markdown_under
from .harness import FOOTNOTE_DEF, FOOTNOTE_REF, body_sections, claims
from .program import Program
from .terms import term_set

NOT_FOUND = "nothing in this memory answers the question"

Embed = Callable[[list[str]], Any]


@recordclass
class Answer:
    path: str
    title: str
    tier: int
    score: float
    passages: list[dict[str, Any]] = field(default_factory=list)
    relevance: float = 0.0  # see relevance(); the floor compares with this
    claims: list[str] = field(default_factory=list, repr=False)
    # The newest date of the sources each claim cites (claims[0] is the title: "").
    dates: list[str] = field(default_factory=list, repr=False)
    newer_of: str = ""  # the answer this one was put before, as the newer (see prefer_newer)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "title": self.title,
            "tier": self.tier,
            "score": self.score,
            "relevance": self.relevance,
            "passages": self.passages,
            **({"newer_than": self.newer_of} if self.newer_of else {}),
        }


@recordclass
class Recall:
    question: str
    answers: list[Answer] = field(default_factory=list)
    snapshot: list[str] = field(default_factory=list)
    indexes_read: list[str] = field(default_factory=list)
    bodies_read: list[str] = field(default_factory=list)
    chars_read: int = 0
    nearest: list[Answer] = field(default_factory=list)  # below the floor: pointers only
    floor: float = 0.0
    relevance_by: str = "words"  # "meaning+words" when the embedder scored the claims

    @property
    def found(self) -> bool:
        return bool(self.answers)

    def to_dict(self, count: Callable[[str], int] | None = None) -> dict[str, Any]:
        return {
            "question": self.question,
            "found": self.found,
            "not_found": not self.found,
            "message": "" if self.found else NOT_FOUND,
            "snapshot": self.snapshot,
            "answers": [a.to_dict() for a in self.answers],
            "nearest": [a.to_dict() for a in self.nearest],
            "relevance": {"floor": self.floor, "by": self.relevance_by},
            "read": {"indexes": self.indexes_read, "bodies": self.bodies_read},
            "chars_read": self.chars_read,
        }


def _overlap(q: frozenset[str], text: str) -> int:
    return len(q & term_set(text))


class Walker:
    """Reads the routers and articles a question leads to.

    ``visible(path)`` says whether a path may be read: a link in an index file is the
    writer's text, so it can point out of the store (``../../etc/passwd``), into
    ``quarantine/`` or at a forgotten page. Only what search would show is followed.
    """

    def __init__(
        self,
        root: Path,
        program: Program,
        question: str,
        visible: Callable[[str], bool],
    ) -> None:
        self.root = root
        self.visible = visible
        self.program = program
        self.q = term_set(question)
        self.recall = Recall(question)

    def _read(self, rel: str, *, body: bool) -> str:
        text = (self.root / rel).read_text(encoding="utf-8", errors="replace")
        self.recall.chars_read += len(text)
        (self.recall.bodies_read if body else self.recall.indexes_read).append(rel)
        return text

    def tier0(self) -> None:
        snap = self.root / "SNAPSHOT.md"
        if not snap.is_file() or not self.q:
            return
        text = snap.read_text(encoding="utf-8", errors="replace")
        self.recall.chars_read += len(text)
        for line in text.splitlines():
            if line.startswith("- ") and _overlap(self.q, line) >= max(1, min(2, len(self.q))):
                self.recall.snapshot.append(line[2:])

    def tier1(self) -> list[tuple[float, str, str]]:
        """Candidate articles (score, path, title) found by walking the routers."""
        budget = self.program.budgets.index_reads
        if not self.q or not self.visible("index.md"):
            return []
        found: list[tuple[float, str, str]] = []
        queue: list[tuple[float, str]] = [(0.0, "index.md")]
        while queue and len(self.recall.indexes_read) < budget:
            queue.sort(key=lambda t: -t[0])
            _, rel = queue.pop(0)
            for entry in okf.entries(self._read(rel, body=False)):
                dest = posixpath.normpath(posixpath.join(posixpath.dirname(rel), entry.path))
                score = _overlap(self.q, f"{entry.title} {entry.description} {dest}")
                if dest.endswith("/index.md"):
                    if (score > 0 or rel == "index.md") and self.visible(dest):
                        queue.append((float(score), dest))
                elif score > 0 and self.visible(dest):
                    found.append((score / max(1, len(self.q)), dest, entry.title))
        found.sort(key=lambda t: (-t[0], t[1]))
        return found

    def read_article(self, rel: str, title: str, tier: int, score: float) -> None:
        text = self._read(rel, body=True)
        parsed = frontmatter.parse(text)
        listed = parsed.fm.get("sources")
        entries = [s for s in (listed if isinstance(listed, list) else []) if isinstance(s, dict)]
        sources = {s.get("id"): s.get("resource") for s in entries}
        dated = {s.get("id"): str(s.get("date") or "") for s in entries}
        defs = {m.group(1): m.group(2) for m in FOOTNOTE_DEF.finditer(parsed.body)}
        passages = []
        every: list[str] = []
        dates: list[str] = []
        for heading, section_text in body_sections(parsed.body).items():
            if heading in ("related", "superseded"):
                continue
            for claim in claims(section_text):
                every.append(re.sub(FOOTNOTE_REF, "", claim).strip())
                cited = [dated.get(i, "") for i in FOOTNOTE_REF.findall(claim)]
                dates.append(max(cited, default=""))
                if _overlap(self.q, claim) == 0:
                    continue
                cites = [sources.get(i) or defs.get(i) or i for i in FOOTNOTE_REF.findall(claim)]
                passages.append(
                    {"text": re.sub(FOOTNOTE_REF, "", claim).strip(), "citations": cites}
                )
        passages.sort(key=lambda p: -_overlap(self.q, str(p["text"])))
        name = str(parsed.fm.get("title") or title)
        self.recall.answers.append(
            Answer(
                rel,
                name,
                tier,
                round(score, 3),
                passages[:3],
                claims=[name, *every],
                dates=["", *dates],
            )
        )


def run(
    root: Path,
    program: Program,
    question: str,
    search: Callable[[str, int], list[Any]],
    visible: Callable[[str], bool],
    *,
    settings: Any = None,
) -> Recall:
    """Tiers 0-2, then :func:`judge` with ``[engine] answer_floor`` and, when embeddings are
    enabled, the embedder (no settings: no floor, words only)."""
    floor, embed, known_miss, newer, kinds = 0.0, None, 1.0, Newer(), False
    if settings is not None:
        from .meaning import embedder_for

        floor = settings.engine.answer_floor
        known_miss = settings.engine.answer_known_miss
        kinds = settings.engine.answer_kind
        newer = Newer(settings.engine.answer_newer_ratio, settings.engine.answer_newer_similarity)
        if settings.embeddings.enabled:
            embed, _ = embedder_for(settings, purpose="query")
    walker = Walker(root, program, question, visible)
    walker.tier0()
    bodies = program.budgets.article_bodies
    for score, rel, title in walker.tier1()[:bodies]:
        walker.read_article(rel, title, 1, score)
    if len(walker.recall.answers) < bodies and walker.q:
        seen = {a.path for a in walker.recall.answers}
        hits = search(question, program.budgets.search_hits)
        for hit in hits:
            if len(walker.recall.answers) >= bodies:
                break
            path = getattr(hit, "path", "")
            if path in seen or not path.startswith("wiki/") or path.endswith(okf.RESERVED):
                continue
            seen.add(path)
            walker.read_article(path, getattr(hit, "title", path), 2, float(hit.score))
    recall = walker.recall
    judge(root, recall, floor=floor, embed=embed, known_miss=known_miss, newer=newer, kinds=kinds)
    return recall


@recordclass(frozen=True)
class Newer:
    """When a later page answers the question with another value (see :func:`prefer_newer`):
    its relevance is at least ``ratio`` of the best's and, by meaning, its claim is at least
    ``similarity`` close to the best's claim. ``ratio`` above 1 turns the rule off."""

    ratio: float = 0.5
    similarity: float = 0.4


def judge(
    root: Path,
    recall: Recall,
    *,
    floor: float,
    embed: Embed | None,
    known_miss: float = 1.0,
    newer: Newer | None = None,
    kinds: bool = False,
) -> None:
    """Rank the answers by relevance and apply the floor: when even the best is below it,
    the answers become ``nearest`` pointers and the result is "not found". A newer page
    that answers with another value then goes first (:func:`prefer_newer`).

    Also "not found" when the best answer lacks more than ``known_miss`` of the question's
    term weight in words that other articles of the wiki do use (:func:`known_missing`): the
    memory knows those words, just not on this page, so the page is about the question's
    subject but not about what it asks (the date of the last repot of a plant whose page
    only says how to water it).

    With ``kinds``, also "not found" when the question asks for a kind of value (how
    much, how many, when ...) that the best answer's title and claims do not hold
    (:func:`answers_kind`)."""
    recall.floor = floor
    if not recall.answers:
        return
    df, total = document_frequencies(root)
    q = list(term_set(recall.question))
    qvec = embed([recall.question])[0] if embed is not None else None
    recall.relevance_by = "meaning+words" if qvec is not None else "words"
    for a in recall.answers:
        a.relevance = round(relevance(q, a.claims, df, total, qvec, embed), 3)
    recall.answers.sort(key=lambda a: -a.relevance)  # stable: the walk's order breaks ties
    best = recall.answers[0]
    if (
        best.relevance < floor
        or known_missing(q, best.claims, df, total) > known_miss
        or (kinds and not answers_kind(recall.question, best.claims))
    ):
        recall.nearest, recall.answers = recall.answers, []
    elif newer is not None:
        prefer_newer(recall.answers, newer, q, qvec)


def _bundle(path: str) -> str:
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else ""


def _best_claim(answer: Answer, q: list[str], qvec: Any) -> int:
    """The index (in ``answer.claims``, never the title at 0) of the claim nearest the
    question: by cosine with the embedder, else by question words shared.

    Only claims that cite a dated source compete when the page has any: a line that cites
    nothing (the extractive writer's ``Main terms: ...`` takeaway) can be nearest the
    question, but it states no fact of any date, so a newer page could never be compared
    with it."""
    if len(answer.claims) < 2:
        return 0
    rest: Sequence[int] = range(1, len(answer.claims))
    if len(answer.dates) == len(answer.claims):
        dated = [i for i in rest if answer.dates[i]]
        rest = dated or rest
    if qvec is not None and all(c in _CLAIMS for c in answer.claims):
        return max(rest, key=lambda i: float(_CLAIMS[answer.claims[i]] @ qvec))
    terms = frozenset(q)
    return max(rest, key=lambda i: _overlap(terms, answer.claims[i]))


def prefer_newer(answers: list[Answer], rule: Newer, q: list[str], qvec: Any) -> None:
    """Put first the newest answer that gives the question another value than the best one.

    Two pages of one bundle can both answer a question when a later note changed a fact
    in other words than the first, so the update was not seen at consolidation ("Spice
    Route's per head cost goes to 48" after "Spice Route quoted 42 per head"). An answer
    goes before the best when it is in the best's bundle, its relevance is at least
    ``rule.ratio`` of the best's, and its claim nearest the question (:func:`_best_claim`)
    cites a newer source than the best's claim does, states another value of the same kind
    (:func:`memdir.engine.updates.changed_value`) and is about the same fact: by meaning, the
    two claims at least ``rule.similarity`` apart; without the embedder, sharing their
    subject words (:func:`memdir.engine.updates.same_fact`). The answer moved records
    ``newer_than`` (the page it went before)."""
    from . import updates

    if len(answers) < 2:
        return
    best = answers[0]
    bi = _best_claim(best, q, qvec)
    if bi == 0 or len(best.dates) != len(best.claims):
        return
    claim, date = best.claims[bi], best.dates[bi]
    chosen: tuple[str, int] | None = None
    for n, other in enumerate(answers[1:], start=1):
        if _bundle(other.path) != _bundle(best.path):
            continue
        if other.relevance < rule.ratio * best.relevance:
            continue
        oi = _best_claim(other, q, qvec)
        if oi == 0 or len(other.dates) != len(other.claims) or other.dates[oi] <= date:
            continue
        text = other.claims[oi]
        if not (updates.changed_value(claim, text) or updates.changed_value(text, claim)):
            continue
        if qvec is not None and claim in _CLAIMS and text in _CLAIMS:
            if float(_CLAIMS[claim] @ _CLAIMS[text]) < rule.similarity:
                continue
        elif not updates.same_fact(claim, text):
            continue
        if chosen is None or other.dates[oi] > chosen[0]:
            chosen = (other.dates[oi], n)
    if chosen is not None:
        moved = answers.pop(chosen[1])
        moved.newer_of = best.path
        answers.insert(0, moved)


_NUMBER_WORDS = re.compile(
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|thirty|"
    r"forty|fifty|hundred|dozen|half|a couple|a few|several)\b",
    re.IGNORECASE,
)
_WHEN_WORDS = re.compile(
    r"\b(?:jan(?:uary)?|feb(?:ruary)?|march|april|may|june|july|aug(?:ust)?|sept?(?:ember)?|"
    r"oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|easter|christmas|tomorrow|tonight|today|"
    r"yesterday|morning|evening|afternoon|night|noon|midday|midnight|weekend|week|month|year|"
    r"spring|summer|autumn|winter|daily|weekly|monthly|dawn|dusk)\b",
    re.IGNORECASE,
)
_YEAR = re.compile(r"\b(?:1[89]|20)\d\d\b")
_NOT_AMOUNTS = frozenset({"date", "time", "weekday", "code"})
_ASKS_AMOUNT = re.compile(r"^\s*how (?:much|many|old)\b", re.IGNORECASE)
_ASKS_LENGTH = re.compile(r"^\s*how long\b", re.IGNORECASE)
_ASKS_WHEN = re.compile(
    r"^\s*(?:when\b|what (?:time|date|day)\b|which (?:day|night|evening|month|week)\b)",
    re.IGNORECASE,
)


#: A question that asks for an identifier: a number that names something (a policy, order,
#: sail or frame number; "the number of" asks for a count), a code, a reference or a PIN.
_ASKS_ID = re.compile(
    r"\b(?:(?<!\bthe )(?<!\ba )(?<!\bany )number|number(?!\s+of\b)|code|reference|ref|pin)\b",
    re.IGNORECASE,
)
_ASKS_PHONE = re.compile(r"\b(?:phone|mobile|landline)\b", re.IGNORECASE)
#: An identifier: a word that mixes letters and digits (``QX7RTB``, ``HX-44721``), or a run
#: of four digits or more that is not a year (``4719``); an amount, a count or a date
#: (``285 pounds``, ``3,410``, ``12/04``) is none.
_ID_MIXED = re.compile(
    r"(?<![\w£$€.,])(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[A-Za-z\d]+(?:-[A-Za-z\d]+)*(?![\w]|[.,]\d)"
)
_ID_DIGITS = re.compile(r"(?<![\w£$€.,:/-])\d{4,}(?![\w:/%-]|[.,]\d)")
_ID_UNITS = re.compile(
    r"\d+(?:st|nd|rd|th|s|am|pm|g|kg|mg|ml|l|km|m|cm|mm|mph|gb|mb|tb|ghz|mhz|hz|mbps|p|k|hrs?|"
    r"mins?|x)",
    re.IGNORECASE,
)
_PHONE = re.compile(r"(?<![\w£$€.,])\+?\d(?:[\s-]?\d){6,}")


def holds_identifier(text: str, *, phone: bool = False) -> bool:
    """Whether ``text`` holds an identifier (see ``_ID_MIXED``, ``_ID_DIGITS``); with
    ``phone``, a run of seven digits or more (spaces and dashes allowed), as a phone
    number is written."""
    if phone:
        return bool(_PHONE.search(text))
    for m in _ID_MIXED.finditer(text):
        if not _ID_UNITS.fullmatch(m.group(0)):
            return True
    return any(not _YEAR.fullmatch(m.group(0)) for m in _ID_DIGITS.finditer(text))


def answers_kind(question: str, texts: list[str]) -> bool:
    """Whether ``texts`` (an answer's title and claims) hold a value of the kind the
    question asks for: an amount or count for "how much / how many / how old", an amount
    or a length of time for "how long", a date, time, weekday or time word for "when /
    what time / which day" (a year counts). A question of another form (who, what,
    where ...) asks for no kind this can check: True."""
    from . import updates

    text = " ".join(texts)
    kinds = {updates.kind(v) for v in updates.values(text)}
    amount = bool(kinds - _NOT_AMOUNTS) or bool(_NUMBER_WORDS.search(text))
    when = bool(kinds & {"date", "time", "weekday"}) or bool(_WHEN_WORDS.search(text))
    when = when or bool(_YEAR.search(text))
    if _ASKS_AMOUNT.match(question):
        return amount
    if _ASKS_LENGTH.match(question):
        return amount or when
    if _ASKS_WHEN.match(question):
        return when
    if _ASKS_PHONE.search(question) and re.search(r"\bnumber\b", question, re.IGNORECASE):
        return holds_identifier(text, phone=True)
    if _ASKS_ID.search(question):
        return holds_identifier(text)
    return True


def known_missing(q: list[str], texts: list[str], df: dict[str, int], total: int) -> float:
    """The share of the question's term weight (IDF over the wiki) in terms some article
    uses but ``texts`` (an article's title and claims) do not: 0 when the article holds every
    question word the wiki knows. A word no article uses does not count: a paraphrase ("How
    fast ...") is not evidence that the answer is elsewhere."""
    if not q:
        return 0.0
    have = term_set(" ".join(texts))

    def idf(t: str) -> float:
        return math.log((total + 1) / (df.get(t, 0) + 0.5))

    weight = sum(idf(t) for t in q)
    absent = sum(idf(t) for t in q if df.get(t, 0) > 0 and t not in have)
    return absent / weight if weight > 0 else 0.0


def relevance(
    q: list[str],
    texts: list[str],
    df: dict[str, int],
    total: int,
    qvec: Any,
    embed: Embed | None,
) -> float:
    """How well an article answers: the share of the question's term weight (IDF over the
    wiki, a term no article uses weighing most) that the article's title and claims hold,
    plus, with the embedder, the best cosine between the question and one claim.

    With words only the coverage counts twice, so one floor fits both scales."""
    if not q or not texts:
        return 0.0
    have = term_set(" ".join(texts))

    def idf(t: str) -> float:
        return math.log((total + 1) / (df.get(t, 0) + 0.5))

    weight = sum(idf(t) for t in q)
    coverage = sum(idf(t) for t in q if t in have) / weight if weight > 0 else 0.0
    if qvec is None or embed is None:
        return 2 * coverage
    missing = [t for t in dict.fromkeys(texts) if t not in _CLAIMS]
    if missing:
        if len(_CLAIMS) > 50_000:
            _CLAIMS.clear()
        for t, v in zip(missing, embed(missing), strict=True):
            _CLAIMS[t] = v
    best = max(float(_CLAIMS[t] @ qvec) for t in texts)
    return best + coverage


_CLAIMS: dict[str, Any] = {}  # claim text -> vector: claims repeat across questions


_DF: dict[str, tuple[float, frozenset[str]]] = {}  # path -> (mtime, terms): one process' cache


def document_frequencies(root: Path) -> tuple[dict[str, int], int]:
    """Per term, how many wiki articles use it, and the number of articles (files whose
    modification time changed since the last call are read again)."""
    df: dict[str, int] = {}
    total = 0
    for rel in markdown_under(root, "wiki"):
        if rel.endswith(okf.RESERVED):
            continue
        path = root / rel
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        key = str(path)
        cached = _DF.get(key)
        if cached is None or cached[0] != mtime:
            text = path.read_text(encoding="utf-8", errors="replace")
            cached = (mtime, term_set(text))
            _DF[key] = cached
        total += 1
        for t in cached[1]:
            df[t] = df.get(t, 0) + 1
    return df, total
