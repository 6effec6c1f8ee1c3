"""Does the injected pack hold what the question needs? LoCoMo replayed as one agent's sessions.

    python bench/pack_recall.py --data locomo10-dev.json [--audit errors.json] [--budget 1500]

Each conversation goes into a fresh store as one agent's memory: every session a thread,
every dialogue turn a turn record of one user (``input`` is ``speaker: text``, the parent the
session's previous turn), as the hooks would have recorded it. Then each question is asked
as the first prompt of a new session: the pack is what ``UserPromptSubmit`` injects
(``Memory.context`` with the session as thread, the one user, and the keywords the hook
draws from the prompt, within ``--budget`` tokens). A question is answered by the pack when
one of its evidence turns is among the pack's turns. Beside it, in the same run, plain
recency: the last N turns of the memory, N being the number of turns that question's pack
held (the same room, filled by time alone).

The data is not part of memdir (its licence is non-commercial): pass its path.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from locomo import _id_at, load
from memdir.agents.hooks import keywords_of
from memdir.service import Memory

USER = "me"


def replay(root: Path, conv: Any) -> tuple[Memory, dict[str, str], list[str]]:
    """The conversation as one agent's turns: (memory, turn id -> dia id, ids oldest first)."""
    Memory.init(root).close()
    mem = Memory.open(
        root, overrides={"embeddings": {"enabled": False}, "store": {"git_commit": False}}
    )
    ids: dict[str, str] = {}
    order: list[str] = []
    previous: dict[int, str] = {}
    for position, turn in enumerate(conv.turns):
        ident = _id_at(int(turn.when.timestamp() * 1000) + position * 1000)
        parents = [previous[turn.session]] if turn.session in previous else []
        mem.record_turn(
            id=ident,
            thread=f"session-{turn.session}",
            user=USER,
            input=f"{turn.speaker}: {turn.text}",
            parents=parents,
            channel="claude-code",
        )
        previous[turn.session] = ident
        ids[ident] = turn.dia_id
        order.append(ident)
    return mem, ids, order


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="the LoCoMo JSON file")
    ap.add_argument("--audit", type=Path, help="the audit file of corrected evidence")
    ap.add_argument("--budget", type=int, default=1500, help="the pack's budget in tokens")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--limit-convs", type=int, default=0, help="only the first N conversations")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    convs = load(args.data, args.audit)
    for conv in convs[: args.limit_convs] if args.limit_convs else convs:
        with tempfile.TemporaryDirectory(prefix="memdir-pack-") as tmp:
            mem, ids, order = replay(Path(tmp) / "store", conv)
            with mem:
                for q in conv.questions:
                    if not q.evidence:
                        continue
                    pack = mem.context(
                        f"question-{len(rows)}", USER, keywords_of(q.text), args.budget
                    )
                    turns = [ids[i.ref] for i in pack.items if i.kind == "turn" and i.ref in ids]
                    recent = {ids[t] for t in order[len(order) - len(turns) :]} if turns else set()
                    wanted = set(q.evidence)
                    rows.append(
                        {
                            "conversation": conv.sample_id,
                            "pack": bool(wanted & set(turns)),
                            "recency": bool(wanted & recent),
                            "turns": len(turns),
                            "tokens": pack.tokens,
                        }
                    )
    n = len(rows)
    out = {
        "questions": n,
        "budget": args.budget,
        "pack_holds_evidence": round(sum(r["pack"] for r in rows) / n, 4) if n else 0.0,
        "recency_holds_evidence": round(sum(r["recency"] for r in rows) / n, 4) if n else 0.0,
        "turns_per_pack_mean": round(sum(r["turns"] for r in rows) / n, 1) if n else 0.0,
        "tokens_per_pack_max": max((r["tokens"] for r in rows), default=0),
        "seconds": round(time.perf_counter() - started, 1),
    }
    by_conv: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_conv.setdefault(r["conversation"], []).append(r)
    out["per_conversation"] = {
        c: {
            "pack": round(sum(r["pack"] for r in rs) / len(rs), 3),
            "recency": round(sum(r["recency"] for r in rs) / len(rs), 3),
        }
        for c, rs in by_conv.items()
    }
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
