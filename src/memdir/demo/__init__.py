"""The demo: build a store from the packaged corpus and run every engine verb.

``python -m memdir.demo [--dir D]`` (what ``make demo`` runs) creates a store in a temporary
folder (or ``D``), adds the corpus bundles, ingests the sources, consolidates, queries,
refines, evaluates, reflects, and prints the memory report.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

CONVERSATION = [
    ("How often should I feed my sourdough starter?", "Feed it daily at room temperature."),
    ("It smells of acetone, is it ruined?", "No: it is hungry. Feed it twice a day for a while."),
    ("Can I keep it in the fridge instead?", "Yes, then feed it once a week."),
]
QUESTIONS = [
    "How often should a sourdough starter be fed?",
    "How deep should tomato seedlings be planted?",
    "How do I oil a bicycle chain?",
]


def corpus_dir() -> Path:
    return Path(str(resources.files("memdir").joinpath("demo", "corpus")))


def build(directory: Path, *, echo: Any = print) -> dict[str, Any]:
    """Build the demo store in ``directory`` and return what each verb reported."""
    from ..service import Memory

    corpus = corpus_dir()
    mem = Memory.init(directory)
    try:
        bundles = yaml.safe_load((corpus / "bundles.yaml").read_text(encoding="utf-8"))
        for name, scope in bundles.items():
            mem.bundle_add(name, scope)
        sources = sorted((corpus / "sources").glob("*.md"))
        mem.ingest([(p.name, p.read_bytes()) for p in sources], provenance="demo:corpus")
        shutil.copyfile(corpus / "evals" / "questions.yaml", mem.root / "evals" / "questions.yaml")
        consolidated = mem.consolidate()
        turns = record_conversation(mem)
        pack = mem.context(thread="kitchen-help", user="ana", keywords=["starter", "fridge"])
        ancestors = mem.ancestors(turns[-1].id, depth=5)
        turn_hits = mem.search("acetone smell", type="turn", limit=3)
        answers = [mem.query(q) for q in QUESTIONS]
        audit = mem.refine(label="demo")
        evaluation = mem.evaluate()
        reflected = mem.reflect()
        report = mem.memory_report()
    finally:
        mem.close()
    echo(f"store: {directory}")
    echo(consolidated["commit"])  # "consolidate: N article(s) in ..."
    for q in consolidated["quarantined"]:
        echo(f"  quarantined {q['source']}: {q['reason']}")
    echo(f"turns: recorded {len(turns)} in thread kitchen-help, each with its parent")
    echo(f"context (mode one): {len(pack.items)} items, {pack.tokens}/{pack.budget} tokens")
    for item in pack.items:
        echo(f"  {item.kind}: {item.ref} ({item.reason})")
    echo(f"ancestors of the last turn: {[a.id for a in ancestors]}")
    echo("search turns for 'acetone smell' (mode two):")
    for hit in turn_hits:
        echo(f"  {hit.title}: {hit.snippet}")
    for question, answer in zip(QUESTIONS, answers, strict=True):
        echo(f"query: {question}")
        for a in answer["answers"][:2]:
            # The claim that matched, or the article's title when no claim shares a word.
            first = a["passages"][0]["text"] if a["passages"] else f"({a['title']})"
            echo(f"  [tier {a['tier']}] {a['path']}: {first}")
        echo(
            f"  read {len(answer['read']['indexes'])} indexes, "
            f"{len(answer['read']['bodies'])} bodies, {answer['tokens_read']} tokens"
        )
    okf = ", ".join(
        f"{b}: {v if isinstance(v, str) else 'violations'}" for b, v in audit["okf"].items()
    )
    echo(f"refine: run=refine {audit['label']} drift={audit['drift']} ({okf})")
    echo(
        f"evaluate: {evaluation['questions']} questions, hit@1={evaluation['hit@1']} "
        f"hit@3={evaluation['hit@3']} mrr={evaluation['mrr']}"
    )
    echo(
        f"reflect: {reflected['lessons']} lessons, snapshot {reflected['snapshot_tokens']}/"
        f"{reflected['snapshot_cap']} tokens"
    )
    from ..kiwi.report import render_text

    echo("memory report:")
    echo(render_text(report).rstrip())
    return {
        "turns": turns,
        "context": pack,
        "consolidate": consolidated,
        "answers": answers,
        "refine": audit,
        "evaluate": evaluation,
        "reflect": reflected,
        "report": report,
    }


def record_conversation(mem: Any) -> list[Any]:
    """Record a short conversation as turn records, each naming the previous as parent."""
    records: list[Any] = []
    for question, reply in CONVERSATION:
        worklog = [
            {"tool": "query", "args": {"question": question}, "result": "wiki/kitchen/..."},
            {"tool": "answer", "args": {}, "result": reply},
        ]
        record = mem.record_turn(
            thread="kitchen-help",
            user="ana",
            channel="demo",
            input=question,
            output=reply,
            worklog=worklog,
            parents=[records[-1].id] if records else [],
            keywords=["sourdough", "starter"],
            actor="demo-agent",
        )
        records.append(record)
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m memdir.demo", description=__doc__)
    parser.add_argument("--dir", help="Build the store here (default: a temporary folder).")
    args = parser.parse_args(argv)
    target = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="memdir-demo-")) / "store"
    from ..errors import MemdirError, StoreExists

    try:
        build(target)
    except StoreExists:
        # The demo builds a store of its own: --force (as `memdir init` says) is not for it.
        print(
            f"error: {target} is already a memdir store; give --dir a new folder", file=sys.stderr
        )
        raise SystemExit(1) from None
    except MemdirError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
