"""Yardstick of "the engine that learns" (issue 17): routing, quarantine, answers, updates,
"not found" and turn consolidation, measured on a hand-written corpus.

    python bench/learning.py bench/data/learning/dev.json [--json] [--details]
        [--variant NAME[:section.key=value,...]]... [--check]
    python bench/learning.py bench/data/learning/dev.json bench/data/learning/heldout*.json

With several corpora, every variant runs on each, and one table per figure lists the
corpora side by side with their mean, so a change is judged on all of them at once, not
tuned to one.

For each variant (default: the lexical router of before issue 17, the nearest-members router
that came next, the meaning router of today (the walk), and the meaning router with turns
folded on every consolidate) a fresh store is made in a temp folder with the Python API:
every bundle is added, every note ingested (the older note of each update pair in an
earlier call than the newer one, dates in the frontmatter as ``date:``), the inbox
consolidated, the threads recorded as turns (each turn's parent is the one before it) and
the store consolidated again.
Then:

- where each note was filed: the bundles of the wiki pages whose ``merged-from`` (or
  ``sources``) name the note's episode id or inbox path; quarantined: a file under
  ``quarantine/`` with the note's episode id;
- each question through ``query``: answered from the right note when the first answer is a
  page built from that note; an update question is answered newer first when that page is
  built from the newer note and its text gives the new value before any old one; an
  unanswerable question counts as "not found" when the result says ``not_found: true`` or
  ``found: false`` (``query``'s relevance floor, ``engine.answer_floor``);
- the share of turn episodes (``episodes/turns/``) the memory report counts as merged.

``--variant lexical:engine.router=lexical`` names a run and the settings it overrides (values
are read as JSON when they parse, else as strings), so a new feature can be printed beside
today's behaviour in one run. ``--check`` only checks the corpus's shape and its paraphrase
flags (see ``paraphrase``) and exits 1 on a problem.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

GOALS: dict[str, tuple[str, str, float]] = {
    # key: (label, comparison, goal)
    "filed_exactly": ("notes filed into exactly their bundle(s)", ">=", 0.90),
    "offtopic_quarantined": ("off-topic notes quarantined", ">=", 0.90),
    "ontopic_quarantined": ("on-topic notes quarantined by mistake", "<=", 0.05),
    "answered_right_note": ("answerable questions answered from the right note", ">=", 0.85),
    "update_newer_first": ("update questions answered with the newer fact first", ">=", 0.80),
    "unanswerable_not_found": ('unanswerable questions answered "not found"', ">=", 0.80),
    "turns_merged": ("turn episodes merged into pages after consolidation", ">=", 1.00),
}
EXTRA: dict[str, str] = {
    # figures with no goal of their own, printed to explain the ones above
    "filed_paraphrased": "  of them, paraphrased notes filed exactly",
    "filed_literal": "  of them, notes using scope words filed exactly",
    "filed_two_bundle": "  of them, two-bundle notes filed exactly",
    "answer_has_value": "answerable questions whose first page holds the answer",
}

SHAPE = {
    "bundles": 5,
    "ontopic": 40,
    "two_bundle": 4,
    "offtopic": 8,
    "offtopic_sharing": 4,  # at least
    "updates": 6,
    "questions": 30,
    "update_questions": 6,
    "unanswerable": 5,
    "threads": 3,
}


# ---- the corpus ------------------------------------------------------------------------


def scope_hits(scope: str, text: str) -> list[str]:
    """The note's words that count as one of the scope's content words.

    A content word is what the router of today keeps (``memdir.engine.terms.terms``:
    lowercased, stopwords and numbers dropped, light stemming). A note word hits a scope
    word when their stems are equal, or when one stem starts with the other and the shorter
    has at least three letters (so ``bakery`` hits ``baking``, ``houseplant`` hits ``plant``):
    stricter than the router, so a note marked as a paraphrase really avoids the scope."""
    from memdir.engine.terms import STOPWORDS, stem, words

    scope_stems = {stem(w.strip("'-")) for w in words(scope)} - {""}
    scope_stems = {s for s in scope_stems if s not in STOPWORDS and len(s) >= 2}
    hits = []
    for raw in words(text):
        word = raw.strip("'-")
        if len(word) < 2 or word in STOPWORDS or word.isdigit():
            continue
        s = stem(word)
        for t in scope_stems:
            short, long_ = sorted((s, t), key=len)
            if s == t or (len(short) >= 3 and long_.startswith(short)):
                hits.append(word)
                break
    return hits


def paraphrase(corpus: Mapping[str, Any], note: Mapping[str, Any]) -> bool:
    """True when the note (title and text) uses no content word of any of its bundles'
    scopes (see :func:`scope_hits`)."""
    scopes = {b["name"]: b["scope"] for b in corpus["bundles"]}
    text = f"{note['title']}\n{note['text']}"
    return bool(note["bundles"]) and not any(scope_hits(scopes[b], text) for b in note["bundles"])


def check_corpus(corpus: Mapping[str, Any]) -> list[str]:
    """Every way the corpus differs from the shape of the issue (empty when it fits)."""
    problems: list[str] = []

    def want(what: str, got: int, expected: int, *, at_least: bool = False) -> None:
        if got < expected or (got != expected and not at_least):
            more = "at least " if at_least else ""
            problems.append(f"{what}: {got}, expected {more}{expected}")

    names = [b["name"] for b in corpus["bundles"]]
    notes = corpus["notes"]
    ids = [n["id"] for n in notes]
    by_id = {n["id"]: n for n in notes}
    if len(set(ids)) != len(ids):
        problems.append("note ids are not unique")
    ontopic = [n for n in notes if n["bundles"]]
    offtopic = [n for n in notes if not n["bundles"]]
    want("bundles", len(names), SHAPE["bundles"])
    want("on-topic notes", len(ontopic), SHAPE["ontopic"])
    want("two-bundle notes", sum(len(n["bundles"]) == 2 for n in notes), SHAPE["two_bundle"])
    want("off-topic notes", len(offtopic), SHAPE["offtopic"])
    sharing = [
        n
        for n in offtopic
        if any(scope_hits(b["scope"], f"{n['title']}\n{n['text']}") for b in corpus["bundles"])
    ]
    want(
        "off-topic notes sharing a scope word",
        len(sharing),
        SHAPE["offtopic_sharing"],
        at_least=True,
    )
    for n in notes:
        for b in n["bundles"]:
            if b not in names:
                problems.append(f"{n['id']}: unknown bundle {b!r}")
        sentences = sum(n["text"].count(c) for c in ".!?")
        if not 2 <= sentences <= 9:
            problems.append(f"{n['id']}: {sentences} sentences")
        if n["bundles"] and bool(n.get("paraphrase")) != paraphrase(corpus, n):
            problems.append(
                f"{n['id']}: paraphrase flag {n.get('paraphrase')} but the check says "
                f"{paraphrase(corpus, n)} (hits: "
                + ", ".join(
                    sorted(
                        {
                            w
                            for b in n["bundles"]
                            for w in scope_hits(
                                corpus["bundles"][names.index(b)]["scope"],
                                f"{n['title']}\n{n['text']}",
                            )
                        }
                    )
                )
                + ")"
            )
    paraphrased = sum(bool(n.get("paraphrase")) for n in ontopic)
    if not len(ontopic) // 2 <= paraphrased <= len(ontopic) // 2 + 2:
        problems.append(f"paraphrased notes: {paraphrased} of {len(ontopic)}, expected about half")
    updates = corpus["updates"]
    want("update pairs", len(updates), SHAPE["updates"])
    for u in updates:
        old, new = by_id.get(u["old"]), by_id.get(u["new"])
        if old is None or new is None:
            problems.append(f"update {u['old']} -> {u['new']}: unknown note")
            continue
        if u["old_value"] not in old["text"] or u["new_value"] not in new["text"]:
            problems.append(f"update {u['new']}: the values are not in the notes' texts")
        if not u["old_date"] < u["new_date"]:
            problems.append(f"update {u['new']}: the newer note is not later")
        if old.get("date") != u["old_date"] or new.get("date") != u["new_date"]:
            problems.append(f"update {u['new']}: the notes' dates differ from the pair's")
    questions = corpus["questions"]
    want("questions", len(questions), SHAPE["questions"])
    want(
        "update questions", sum(bool(q.get("update")) for q in questions), SHAPE["update_questions"]
    )
    want(
        "unanswerable questions", sum(q["answer"] is None for q in questions), SHAPE["unanswerable"]
    )
    newer = {u["new"]: u for u in updates}
    for q in questions:
        if q["answer"] is None:
            if q.get("note") is not None or q.get("update"):
                problems.append(f"{q['question']!r}: unanswerable but names a note")
            continue
        note = by_id.get(q["note"])
        if note is None:
            problems.append(f"{q['question']!r}: unknown note {q['note']!r}")
        elif q["answer"].lower() not in note["text"].lower():
            problems.append(f"{q['question']!r}: {q['answer']!r} is not in {q['note']}")
        if q.get("update") and (
            q["note"] not in newer or newer[q["note"]]["new_value"] != q["answer"]
        ):
            problems.append(f"{q['question']!r}: an update question must ask the new value")
    threads = corpus["threads"]
    want("threads", len(threads), SHAPE["threads"])
    for t in threads:
        if not 4 <= len(t["turns"]) <= 6:
            problems.append(f"thread {t['id']}: {len(t['turns'])} turns, expected 4-6")
    return problems


def source_text(note: Mapping[str, Any]) -> str:
    head = f"---\ndate: {note['date']}\n---\n" if note.get("date") else ""
    return f"{head}# {note['title']}\n\n{note['text']}\n"


# ---- one run ---------------------------------------------------------------------------


def parse_variant(text: str) -> tuple[str, dict[str, dict[str, Any]]]:
    name, _, spec = text.partition(":")
    overrides: dict[str, dict[str, Any]] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        key, eq, raw = item.partition("=")
        section, dot, field = key.partition(".")
        if not (eq and dot and section and field):
            raise SystemExit(f"--variant {text!r}: expected NAME:section.key=value,...")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        overrides.setdefault(section, {})[field] = value
    return name, overrides


def run(corpus: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    from memdir import Memory
    from memdir.doc import frontmatter

    t0 = time.perf_counter()
    notes = corpus["notes"]
    by_id = {n["id"]: n for n in notes}
    newer = {u["new"] for u in corpus["updates"]}
    with tempfile.TemporaryDirectory(prefix="memdir-learning-") as tmp:
        root = Path(tmp) / "store"
        Memory.init(root).close()
        mem = Memory.open(root, overrides={k: dict(v) for k, v in overrides.items()})
        try:
            for b in corpus["bundles"]:
                mem.bundle_add(b["name"], b["scope"])
            episode: dict[str, str] = {}  # episode id or inbox path -> note id
            first = [n for n in notes if n["id"] not in newer]
            later = [n for n in notes if n["id"] in newer]
            for group in (first, later):
                placed = mem.ingest([(f"{n['id']}.md", source_text(n)) for n in group])
                for n, p in zip(group, placed, strict=True):
                    episode[p["episode_id"]] = n["id"]
                    episode[p["path"]] = n["id"]
            t_ingest = time.perf_counter()
            first_run = mem.consolidate()
            t_consolidate = time.perf_counter()
            turns = 0
            for thread in corpus["threads"]:
                parent: list[str] = []
                for turn in thread["turns"]:
                    rec = mem.record_turn(
                        thread=thread["id"],
                        user=thread.get("user", ""),
                        input=turn["input"],
                        output=turn["output"],
                        parents=parent,
                    )
                    parent = [rec.id]
                    turns += 1
            second_run = mem.consolidate()
            t_turns = time.perf_counter()

            pages: dict[str, set[str]] = {}  # page -> note ids it was built from
            page_text: dict[str, str] = {}
            filed: dict[str, set[str]] = {n["id"]: set() for n in notes}
            for path in sorted((root / "wiki").rglob("*.md")):
                rel = path.relative_to(root).as_posix()
                if path.name in ("index.md", "log.md"):
                    continue
                text = path.read_text(encoding="utf-8")
                fm = frontmatter.parse(text).fm
                built = _built_from(fm, episode)
                pages[rel] = built
                page_text[rel] = text
                bundle = (
                    fm.get("bundle") if isinstance(fm.get("bundle"), str) else rel.split("/")[1]
                )
                for nid in built:
                    filed[nid].add(bundle)
            quarantined = set()
            for path in (
                sorted((root / "quarantine").rglob("*.md"))
                if (root / "quarantine").is_dir()
                else []
            ):
                fm = frontmatter.parse(path.read_text(encoding="utf-8")).fm
                nid = episode.get(str(fm.get("episode_id", "")))
                if nid:
                    quarantined.add(nid)

            answers = [_ask(mem, q, pages, page_text, corpus) for q in corpus["questions"]]
            t_query = time.perf_counter()

            report = mem.memory_report()
            turn_files = [
                f.path for f in report.episodic_files if f.path.startswith("episodes/turns/")
            ]
            turn_unmerged = [
                f.path for f in report.unmerged if f.path.startswith("episodes/turns/")
            ]
        finally:
            mem.close()
    t_end = time.perf_counter()

    ontopic = [n for n in notes if n["bundles"]]
    offtopic = [n for n in notes if not n["bundles"]]
    exact = {n["id"] for n in ontopic if filed[n["id"]] == set(n["bundles"])}

    def share(ok: int, total: int) -> dict[str, Any]:
        return {"value": round(ok / total, 3) if total else None, "count": ok, "total": total}

    answerable = [a for a in answers if a["expected"] is not None]
    updates = [a for a in answers if a["update"]]
    unanswerable = [a for a in answers if a["expected"] is None]
    figures = {
        "filed_exactly": share(len(exact), len(ontopic)),
        "offtopic_quarantined": share(sum(n["id"] in quarantined for n in offtopic), len(offtopic)),
        "ontopic_quarantined": share(sum(n["id"] in quarantined for n in ontopic), len(ontopic)),
        "answered_right_note": share(sum(a["right_note"] for a in answerable), len(answerable)),
        "update_newer_first": share(sum(a["newer_first"] for a in updates), len(updates)),
        "unanswerable_not_found": share(
            sum(a["not_found"] for a in unanswerable), len(unanswerable)
        ),
        "turns_merged": share(len(turn_files) - len(turn_unmerged), len(turn_files)),
        "filed_paraphrased": share(
            sum(n["id"] in exact for n in ontopic if n.get("paraphrase")),
            sum(bool(n.get("paraphrase")) for n in ontopic),
        ),
        "filed_literal": share(
            sum(n["id"] in exact for n in ontopic if not n.get("paraphrase")),
            sum(not n.get("paraphrase") for n in ontopic),
        ),
        "filed_two_bundle": share(
            sum(n["id"] in exact for n in ontopic if len(n["bundles"]) == 2),
            sum(len(n["bundles"]) == 2 for n in ontopic),
        ),
        "answer_has_value": share(sum(a["has_value"] for a in answerable), len(answerable)),
    }
    for key, (_, op, goal) in GOALS.items():
        value = figures[key]["value"]
        figures[key]["goal"] = f"{op} {goal:.2f}"
        figures[key]["met"] = value is not None and (value >= goal if op == ">=" else value <= goal)
    details = {
        "misfiled": [
            {
                "note": n["id"],
                "expected": sorted(n["bundles"]),
                "filed": sorted(filed[n["id"]]),
                "quarantined": n["id"] in quarantined,
                "paraphrase": bool(n.get("paraphrase")),
            }
            for n in ontopic
            if n["id"] not in exact
        ],
        "offtopic_filed": [
            {"note": n["id"], "filed": sorted(filed[n["id"]])}
            for n in offtopic
            if n["id"] not in quarantined
        ],
        "questions": answers,
        "articles": sum(1 for _ in pages),
        "first_consolidate": {
            "articles": len(first_run.get("articles", [])),
            "quarantined": len(first_run.get("quarantined", [])),
        },
        "second_consolidate": {
            "articles": len(second_run.get("articles", [])),
            "quarantined": len(second_run.get("quarantined", [])),
        },
        "turns_recorded": turns,
        "turn_episodes_unmerged": len(turn_unmerged),
    }
    timing = {
        "ingest": round(t_ingest - t0, 2),
        "consolidate": round(t_consolidate - t_ingest, 2),
        "turns_and_second_consolidate": round(t_turns - t_consolidate, 2),
        "queries": round(t_query - t_turns, 2),
        "total": round(t_end - t0, 2),
    }
    del by_id
    return {"figures": figures, "details": details, "seconds": timing}


def _built_from(fm: Mapping[str, Any], episode: Mapping[str, str]) -> set[str]:
    """The note ids a page names in ``merged-from`` (id or path) or ``sources`` (resource)."""
    out: set[str] = set()
    for key, fields in (("merged-from", ("id", "path")), ("sources", ("resource", "id"))):
        items = fm.get(key)
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, Mapping):
                continue
            for f in fields:
                nid = episode.get(str(item.get(f, "")).strip())
                if nid:
                    out.add(nid)
    return out


def _ask(
    mem: Any,
    q: Mapping[str, Any],
    pages: Mapping[str, set[str]],
    page_text: Mapping[str, str],
    corpus: Mapping[str, Any],
) -> dict[str, Any]:
    result = mem.query(q["question"])
    if "not_found" in result:
        not_found = bool(result["not_found"])
    else:
        not_found = not result.get("found", bool(result.get("answers")))
    answers = result.get("answers") or []
    top = answers[0]["path"] if answers and not not_found else None
    built = pages.get(top, set()) if top else set()
    expected = q.get("note")
    right = bool(expected) and expected in built
    text = page_text.get(top, "") if top else ""
    has_value = bool(q.get("answer")) and right and q["answer"].lower() in text.lower()
    newer_first = False
    if q.get("update") and right:
        pair = next(u for u in corpus["updates"] if u["new"] == expected)
        low = text.lower()
        at_new = low.find(pair["new_value"].lower())
        at_old = low.find(pair["old_value"].lower())
        newer_first = at_new >= 0 and (at_old < 0 or at_new < at_old)
    return {
        "question": q["question"],
        "expected": expected,
        "update": bool(q.get("update")),
        "first": top,
        "first_built_from": sorted(built),
        "right_note": right,
        "has_value": has_value,
        "newer_first": newer_first,
        "not_found": not_found,
        "top_score": answers[0].get("score") if answers else None,
    }


# ---- output ----------------------------------------------------------------------------


def _cell(fig: Mapping[str, Any]) -> str:
    if fig["value"] is None:
        return "n/a"
    mark = "" if "met" not in fig else (" ok" if fig["met"] else " -")
    return f"{fig['value']:.2f} ({fig['count']}/{fig['total']}){mark}"


def print_table(
    corpus_name: str, runs: Sequence[tuple[str, dict[str, Any]]], details: bool
) -> None:
    names = [name for name, _ in runs]
    print(f"corpus: {corpus_name}")
    print("| figure | goal | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for key, (label, _, _) in GOALS.items():
        goal = runs[0][1]["figures"][key]["goal"]
        print(
            f"| {label} | {goal} | " + " | ".join(_cell(r["figures"][key]) for _, r in runs) + " |"
        )
    for key, label in EXTRA.items():
        print(f"| {label} | - | " + " | ".join(_cell(r["figures"][key]) for _, r in runs) + " |")
    print(
        "| seconds (ingest, consolidate, turns + consolidate, queries) | - | "
        + " | ".join(
            "{ingest}, {consolidate}, {turns_and_second_consolidate}, {queries}".format(
                **r["seconds"]
            )
            for _, r in runs
        )
        + " |"
    )
    if not details:
        return
    for name, r in runs:
        d = r["details"]
        print(f"\n## {name}")
        for m in d["misfiled"]:
            where = "quarantined" if m["quarantined"] else ", ".join(m["filed"]) or "nowhere"
            para = " (paraphrase)" if m["paraphrase"] else ""
            print(f"misfiled {m['note']}{para}: expected {', '.join(m['expected'])}, got {where}")
        for m in d["offtopic_filed"]:
            print(f"off-topic filed {m['note']}: {', '.join(m['filed']) or 'nowhere'}")
        for a in d["questions"]:
            if a["expected"] is None:
                ok = a["not_found"]
            else:
                ok = a["right_note"] and (a["newer_first"] or not a["update"])
            if not ok:
                got = "not found" if a["not_found"] else f"{a['first']} {a['first_built_from']}"
                print(
                    f"missed {a['question']!r}: expected {a['expected'] or 'not found'}, got {got}"
                )


def print_summary(
    corpora: Sequence[str], results: Sequence[Sequence[tuple[str, dict[str, Any]]]]
) -> None:
    """One table per figure: a row per variant, a column per corpus, and the mean."""
    names = [name for name, _ in results[0]]
    labels = {**{k: v[0] for k, v in GOALS.items()}, **EXTRA}
    for key, label in labels.items():
        goal = results[0][0][1]["figures"][key].get("goal", "-")
        print(f"\n{label.strip()} ({goal})")
        print("| variant | " + " | ".join(corpora) + " | mean |")
        print("|---|" + "---|" * (len(corpora) + 1))
        for v, name in enumerate(names):
            values = [runs[v][1]["figures"][key]["value"] for runs in results]
            known = [x for x in values if x is not None]
            mean = f"{sum(known) / len(known):.2f}" if known else "n/a"
            cells = ["n/a" if x is None else f"{x:.2f}" for x in values]
            print(f"| {name} | " + " | ".join(cells) + f" | {mean} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("corpus", nargs="+", help="corpus JSON files (bench/data/learning/*.json)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--details", action="store_true", help="list every miss under the table")
    parser.add_argument("--check", action="store_true", help="only check the corpus's shape")
    parser.add_argument(
        "--variant", action="append", default=[], metavar="NAME[:section.key=value,...]"
    )
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variant] or [
        ("lexical router", {"engine": {"router": "lexical"}}),
        ("nearest router", {"engine": {"router": "nearest"}}),
        ("meaning router", {"engine": {"router": "meaning"}}),
        ("meaning + turns", {"engine": {"router": "meaning", "consolidate_turns": True}}),
    ]
    failed = False
    dumps: list[dict[str, Any]] = []
    names: list[str] = []
    results: list[list[tuple[str, dict[str, Any]]]] = []
    for path in args.corpus:
        corpus = json.loads(Path(path).read_text(encoding="utf-8"))
        problems = check_corpus(corpus)
        if args.check:
            for p in problems:
                print(p)
            print(f"{path}: {'fits the shape' if not problems else f'{len(problems)} problem(s)'}")
            failed = failed or bool(problems)
            continue
        for p in problems:
            print(f"warning: {path}: {p}", file=sys.stderr)
        runs = [(name, run(corpus, overrides)) for name, overrides in variants]
        name = corpus.get("name", Path(path).stem)
        names.append(name)
        results.append(runs)
        if args.json:
            out = {
                "corpus": name,
                "path": path,
                "shape_problems": problems,
                "runs": [
                    {"name": n, "overrides": dict(o), **r}
                    for (n, r), (_, o) in zip(runs, variants, strict=True)
                ],
            }
            if not args.details:
                for r in out["runs"]:
                    r["details"] = {k: v for k, v in r["details"].items() if k != "questions"}
            dumps.append(out)
        else:
            print_table(name, runs, args.details)
            print()
    if args.check:
        raise SystemExit(1 if failed else 0)
    if args.json:  # one object for one corpus, a list of them for several
        print(json.dumps(dumps[0] if len(dumps) == 1 else dumps, indent=2))
    elif len(results) > 1:
        print_summary(names, results)


if __name__ == "__main__":
    main()
