"""LoCoMo retrieval benchmark: does memdir search find the evidence turns?

    python bench/locomo.py --data locomo10-dev.json [--mode hybrid] [--json OUT]
        [--audit errors.json] [--limit-convs N] [--keep DIR [--reuse]] [--set S.K=V]

Each conversation goes into a fresh store as turn records (one per dialogue
turn; a session is a thread, the speaker is the user, the session date is the
turn's time, the previous turn of the session is the parent). Every question of
categories 1-4 is asked; retrieval only is scored (no answer generation):
turn-level and session-level recall_any@k / recall_all@k (k = 1, 3, 5, 10),
NDCG@10, MRR (over the top 10), query latency and tokens returned. The same run
scores plain BM25 so every figure has its ratio; each conversation's recall_any@5
is printed as it finishes (and kept under ``conversations`` in the JSON), so a
change can be checked on conversations it was not tuned on. The data is never
copied into the repository: pass its path.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

KS = (1, 3, 5, 10)
DEPTH = 10
CATEGORIES = frozenset({1, 2, 3, 4})
_DIA = re.compile(r"D(\d+):(\d+)")


# -- data ------------------------------------------------------------------------------


@dataclass
class Turn:
    dia_id: str
    session: int
    speaker: str
    text: str
    when: datetime


@dataclass
class Question:
    qid: str
    text: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    dropped_evidence: int = 0


def session_of(dia_id: str) -> str:
    """``D3:7`` -> ``S3``."""
    match = _DIA.fullmatch(dia_id)
    return f"S{match.group(1)}" if match else dia_id


def parse_evidence(values: Iterable[Any]) -> list[str]:
    """Evidence ids normalised: ``D8:6; D9:17`` and ``D:11:26`` style slips are split/fixed."""
    out: list[str] = []
    for value in values:
        for match in re.finditer(r"D:?(\d+):(\d+)", str(value)):
            ident = f"D{int(match.group(1))}:{int(match.group(2))}"
            if ident not in out:
                out.append(ident)
    return out


def parse_date(text: str) -> datetime:
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%I:%M %p on %B %d, %Y"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(f"unparsed LoCoMo date {text!r}")


def load(data: Path, audit: Path | None = None) -> list[Conversation]:
    samples = json.loads(data.read_text(encoding="utf-8"))
    fixes: dict[str, list[str]] = {}
    if audit is not None:
        for item in json.loads(audit.read_text(encoding="utf-8")):
            corrected = parse_evidence(item.get("correct_evidence") or [])
            if corrected:
                fixes[str(item["question_id"])] = corrected
    out = []
    for index, sample in enumerate(samples):
        conv = sample["conversation"]
        turns: list[Turn] = []
        n = 1
        while f"session_{n}" in conv:
            when = parse_date(conv[f"session_{n}_date_time"])
            for turn in conv[f"session_{n}"]:
                text = str(turn.get("text") or "")
                if turn.get("blip_caption"):
                    text = f"{text} [shares an image: {turn['blip_caption']}]".strip()
                turns.append(Turn(str(turn["dia_id"]), n, str(turn["speaker"]), text, when))
            n += 1
        known = {t.dia_id for t in turns}
        questions = []
        dropped = 0
        for qi, qa in enumerate(sample["qa"]):
            category = int(qa.get("category", 0))
            if category not in CATEGORIES:
                continue
            qid = f"locomo_{index}_qa{qi}"
            evidence = fixes.get(qid) or parse_evidence(qa.get("evidence") or [])
            kept = [e for e in evidence if e in known]
            dropped += len(evidence) - len(kept)
            if kept:
                questions.append(Question(qid, str(qa["question"]), category, kept))
        out.append(Conversation(str(sample["sample_id"]), turns, questions, dropped))
    return out


# -- scoring ---------------------------------------------------------------------------


@dataclass
class Result:
    """One question's ranked retrieval (dia ids, best first) and its evidence."""

    ranked: list[str]
    evidence: list[str]
    latency_ms: float = 0.0
    tokens: dict[int, int] = field(default_factory=dict)


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def level_metrics(ranked: Sequence[str], relevant: set[str]) -> dict[str, float]:
    """recall_any@k, recall_all@k, NDCG@10 and MRR@10 of one ranking (binary relevance)."""
    out: dict[str, float] = {}
    for k in KS:
        top = set(ranked[:k])
        out[f"recall_any@{k}"] = float(bool(top & relevant))
        out[f"recall_all@{k}"] = float(relevant <= top)
    dcg = sum(1.0 / math.log2(i + 2) for i, r in enumerate(ranked[:DEPTH]) if r in relevant)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), DEPTH)))
    out["ndcg@10"] = dcg / ideal if ideal else 0.0
    out["mrr"] = next((1.0 / (i + 1) for i, r in enumerate(ranked[:DEPTH]) if r in relevant), 0.0)
    return out


def score(results: Sequence[Result]) -> dict[str, Any]:
    """Mean metrics over questions, at turn level and at session level.

    Session level ranks sessions by their first appearance in the turn ranking.
    """
    levels: dict[str, dict[str, float]] = {"turn": {}, "session": {}}
    for res in results:
        per_level = {
            "turn": level_metrics(_dedupe(res.ranked), set(res.evidence)),
            "session": level_metrics(
                _dedupe(session_of(r) for r in res.ranked), {session_of(e) for e in res.evidence}
            ),
        }
        for level, metrics in per_level.items():
            for name, value in metrics.items():
                levels[level][name] = levels[level].get(name, 0.0) + value
    n = len(results)
    for level in levels.values():
        for name in level:
            level[name] = round(level[name] / n, 4) if n else 0.0
    latencies = sorted(r.latency_ms for r in results)
    tokens: dict[str, float] = {}
    for k in (5, 10):
        values = [r.tokens[k] for r in results if k in r.tokens]
        if values:
            tokens[f"mean@{k}"] = round(statistics.fmean(values), 1)
    return {
        "turn": levels["turn"],
        "session": levels["session"],
        "latency_ms": {
            "p50": round(_percentile(latencies, 50), 2),
            "p95": round(_percentile(latencies, 95), 2),
        },
        "tokens": tokens,
        "questions": n,
    }


def _percentile(values: Sequence[float], pct: float) -> float:
    if not values:
        return 0.0
    rank = max(0, math.ceil(pct / 100 * len(values)) - 1)
    return float(sorted(values)[rank])


# -- ingestion and queries ---------------------------------------------------------------

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def _id_at(ms: int) -> str:
    """A memdir-style 26-character id whose time part is ``ms``."""
    value = (ms << 80) | secrets.randbits(79)
    return "".join(_ALPHABET[(value >> (5 * i)) & 31] for i in range(25, -1, -1))


def open_memory(
    root: Path, overrides: Mapping[str, Mapping[str, Any]], *, fresh: bool = True
) -> Any:
    from memdir.service import Memory

    if fresh:
        Memory.init(root).close()
    base = {"store": {"git_commit": False}}
    merged = {**base, **{k: dict(v) for k, v in overrides.items()}}
    merged["store"] = {**base["store"], **merged.get("store", {})}
    return Memory.open(root, overrides=merged)


def ingest(mem: Any, conv: Conversation) -> dict[str, str]:
    """Write every turn; returns document path -> dia id."""
    paths: dict[str, str] = {}
    previous: dict[int, str] = {}
    for position, turn in enumerate(conv.turns):
        ms = int(turn.when.timestamp() * 1000) + position * 1000
        ident = _id_at(ms)
        thread = f"{conv.sample_id}-session-{turn.session}"
        parents = [previous[turn.session]] if turn.session in previous else []
        if hasattr(mem, "record_turn"):
            record = mem.record_turn(
                id=ident,
                thread=thread,
                user=_name(turn.speaker),
                input=turn.text,
                parents=parents,
            )
            from memdir.doc.turnrecord import turn_path

            path = turn_path(record.id)
        else:
            path = f"episodes/turns/{turn.when:%Y/%m/%d}/{ident}.md"
            mem.write(path, _turn_markdown(ident, thread, turn, parents))
        paths[path] = turn.dia_id
        previous[turn.session] = ident
    return paths


def _name(speaker: str) -> str:
    return re.sub(r"[^\w.-]+", "-", speaker.strip()) or "unknown"


def _turn_markdown(ident: str, thread: str, turn: Turn, parents: list[str]) -> str:
    created = turn.when.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    parent_list = "[" + ", ".join(f'"{p}"' for p in parents) + "]"
    return (
        f'---\nepisode_id: "{ident}"\nmemory_kind: episodic\ntype: turn\n'
        f'thread: "{thread}"\nuser: "{_name(turn.speaker)}"\nchannel: ""\n'
        f'parents: {parent_list}\nkeywords: []\ncreated: "{created}"\n---\n\n'
        f"## Input\n\n{turn.text}\n\n## Compact\n\n\n\n## Output\n\n\n"
    )


def run_mode(
    mem: Any, conv: Conversation, paths: Mapping[str, str], mode: str, count: Any
) -> list[Result]:
    texts = {t.dia_id: t.text for t in conv.turns}
    results = []
    for q in conv.questions:
        started = time.perf_counter()
        hits = mem.search(q.text, limit=DEPTH, mode=mode)
        elapsed = (time.perf_counter() - started) * 1000
        ranked = [paths[h.path] for h in hits if h.path in paths]
        tokens = {k: sum(count(texts[d]) for d in ranked[:k]) for k in (5, 10)}
        results.append(Result(ranked, q.evidence, elapsed, tokens))
    return results


def _counter() -> Any:
    try:
        from memdir.doc.tokencount import count

        count("warm up")
        return count
    except Exception:
        return lambda text: len(text.split())


# -- report ------------------------------------------------------------------------------


def table(main: Mapping[str, Any], base: Mapping[str, Any], mode: str) -> str:
    rows = [f"{'metric':<22}{mode:>10}{'bm25':>10}{'ratio':>8}"]
    for level in ("turn", "session"):
        for name, value in main[level].items():
            ref = base[level].get(name, 0.0)
            ratio = f"{value / ref:.2f}" if ref else "-"
            rows.append(f"{level + ' ' + name:<22}{value:>10.4f}{ref:>10.4f}{ratio:>8}")
    for name in ("p50", "p95"):
        value, ref = main["latency_ms"][name], base["latency_ms"][name]
        ratio = f"{value / ref:.2f}" if ref else "-"
        rows.append(f"{'latency ms ' + name:<22}{value:>10.2f}{ref:>10.2f}{ratio:>8}")
    for name, value in main.get("tokens", {}).items():
        ref = base.get("tokens", {}).get(name, 0.0)
        ratio = f"{value / ref:.2f}" if ref else "-"
        rows.append(f"{'tokens ' + name:<22}{value:>10.1f}{ref:>10.1f}{ratio:>8}")
    rows.append(f"questions: {main['questions']}")
    return "\n".join(rows)


def _postgres_run(
    root: Path,
    overrides: Mapping[str, Mapping[str, Any]],
    dsn: str,
    conv: Conversation,
    paths: Mapping[str, str],
    mode: str,
    count: Any,
) -> list[Result]:
    """The same questions over the same store, ranked by the Postgres engine (docs/postgres.md)."""
    index = {**overrides.get("index", {}), "engine": "postgres", "dsn": dsn}
    shared = {**overrides, "index": {**index, "store": conv.sample_id}}
    mem = open_memory(root, shared, fresh=False)
    try:
        t0 = time.perf_counter()
        mem.reindex(full=True)
        print(f"{conv.sample_id}: postgres rebuilt in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)  # fmt: skip
        return run_mode(mem, conv, paths, mode, count)
    finally:
        mem.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="LoCoMo JSON file")
    parser.add_argument("--mode", default="hybrid", choices=["bm25", "vector", "hybrid"])
    parser.add_argument("--json", type=Path, help="write the figures as JSON here")
    parser.add_argument("--audit", type=Path, help="audit file with corrected evidence")
    parser.add_argument("--limit-convs", type=int, default=None, help="only the first N")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a setting override, e.g. search.neighbour_boost=0.5 (repeatable)",
    )
    parser.add_argument(
        "--engine",
        default="sqlite",
        choices=["sqlite", "both"],
        help="both: also rank every question with the Postgres engine and compare",
    )
    parser.add_argument(
        "--dsn", default="", help="the Postgres DSN (default: a throwaway server, pglocal)"
    )
    parser.add_argument("--keep", type=Path, help="keep the stores under this folder")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: reuse stores ingested by an earlier run (vectors are cached by text)",
    )
    args = parser.parse_args(argv)

    overrides: dict[str, dict[str, Any]] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        overrides.setdefault(section, {})[name] = value
    convs = load(args.data, args.audit)[: args.limit_convs]
    count = _counter()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="memdir-locomo-"))
    main_results: list[Result] = []
    base_results: list[Result] = []
    per_conv: dict[str, dict[str, dict[str, float]]] = {}
    pg_results: list[Result] = []
    server = None
    dsn = args.dsn
    if args.engine == "both" and not dsn:
        from memdir.index import pglocal

        server = pglocal.start()
        dsn = server.dsn
    started = time.perf_counter()
    try:
        for conv in convs:
            root = workdir / conv.sample_id
            saved = root / ".memdir" / "locomo-paths.json"
            reuse = args.reuse and saved.is_file()
            if root.exists() and not reuse:
                shutil.rmtree(root)
            mem = open_memory(root, overrides, fresh=not reuse)
            try:
                t0 = time.perf_counter()
                if reuse:
                    paths = json.loads(saved.read_text(encoding="utf-8"))
                else:
                    paths = ingest(mem, conv)
                    saved.write_text(json.dumps(paths), encoding="utf-8")
                t1 = time.perf_counter()
                if args.mode != "bm25":
                    mem.embed()
                t2 = time.perf_counter()
                base = run_mode(mem, conv, paths, "bm25", count)
                main_res = (
                    base if args.mode == "bm25" else run_mode(mem, conv, paths, args.mode, count)
                )
                mine = score(main_res)
                per_conv[conv.sample_id] = {
                    level: {k: mine[level][k] for k in ("recall_any@5", "recall_any@10")}
                    for level in ("turn", "session")
                }
                print(
                    f"{conv.sample_id}: {len(conv.turns)} turns ingested in {t1 - t0:.1f} s, "
                    f"embedded in {t2 - t1:.1f} s, {len(conv.questions)} questions; "
                    f"recall_any@5 turn {mine['turn']['recall_any@5']:.4f} "
                    f"session {mine['session']['recall_any@5']:.4f}",
                    file=sys.stderr,
                )
                base_results += base
                main_results += main_res
                if args.engine == "both":
                    pg_results += _postgres_run(root, overrides, dsn, conv, paths, args.mode, count)
            finally:
                mem.close()
    finally:
        if server is not None:
            server.remove()
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    figures = score(main_results)
    baseline = score(base_results)
    print(table(figures, baseline, args.mode))
    if pg_results:
        pg_figures = score(pg_results)
        print(f"\nPostgres engine ({args.mode}) beside SQLite ({args.mode}):")
        print(table(pg_figures, figures, args.mode).replace("bm25", "sqlite", 1))
        worst = max(
            abs(pg_figures[level][k] - figures[level][k])
            for level in ("turn", "session")
            for k in figures[level]
        )
        print(f"largest difference postgres - sqlite: {worst:.4f}")
    print(f"total {time.perf_counter() - started:.1f} s", file=sys.stderr)
    if args.json:
        out = dict(figures)
        out["mode"] = args.mode
        out["bm25"] = baseline
        out["settings"] = overrides
        out["conversations"] = per_conv
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
