"""An agent loop on memdir: mode one at the start of a turn, mode two during it,
and the turn recorded with its parents at the end.

The "model" here is a deterministic stand-in so the example runs offline; swap
``answer`` for a call to your model. Run it:

    python examples/agent_loop.py                 # in a fresh temporary store
    python examples/agent_loop.py --root DIR      # in an existing store
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from memdir import Memory
from memdir.files.store import Store

STOPWORDS = {"the", "a", "an", "and", "how", "do", "i", "is", "it", "we", "to", "what", "did"}
CONVERSATION = [
    ("ana", "How do we deploy the api service?"),
    ("ana", "The deploy failed with a migration error, what now?"),
    ("bo", "Did anyone hit a migration error on deploy before?"),
    ("ana", "Thanks, the migration is fixed. Summarise what we did."),
]


def keywords_of(message: str) -> list[str]:
    words = [w.strip("?,.!").lower() for w in message.split()]
    return sorted({w for w in words if len(w) > 3 and w not in STOPWORDS})[:4]


def answer(message: str, pack_text: str, notes: list[str]) -> str:
    """A stand-in model: cites what it was given, deterministically."""
    seen = len([line for line in pack_text.splitlines() if line.startswith("## turn")])
    return f"Answer to {message!r}, using {seen} remembered turns and {len(notes)} notes read."


def run_turn(mem: Memory, thread: str, user: str, message: str) -> dict[str, Any]:
    keywords = keywords_of(message)
    # Mode one: a fixed, cheap pack the agent does not have to ask for.
    pack = mem.context(thread=thread, user=user, keywords=keywords, budget=1500)
    used = [item.ref for item in pack.items if item.kind == "turn"]

    # Mode two: precise queries the agent drives itself, logged as its work.
    worklog: list[dict[str, Any]] = []
    hits = mem.search(" ".join(keywords) or message, limit=3, type="turn")
    worklog.append(
        {"tool": "search", "args": {"query": " ".join(keywords)}, "result": [h.path for h in hits]}
    )
    notes: list[str] = []
    for hit in hits[:2]:
        text = mem.read(hit.path, section="Output").content
        notes.append(text)
        worklog.append({"tool": "read", "args": {"path": hit.path}, "result": text[:200]})
    latest = mem.thread(thread, last=1)
    if latest:
        chain = mem.ancestors(latest[0].id, depth=3)
        worklog.append({"tool": "ancestors", "args": {"id": latest[0].id}, "result": len(chain)})

    reply = answer(message, pack.text, notes)
    # The parents are the turns the agent says it used: the thread's previous
    # turn and the turns it read during the loop.
    parents = [n.id for n in latest]
    parents += [Path(h.path).stem for h in hits[:2] if Path(h.path).stem not in parents]
    record = mem.record_turn(
        thread=thread,
        user=user,
        channel="example",
        input=message,
        output=reply,
        worklog=worklog,
        parents=parents,
        keywords=keywords,
        actor="agent-loop",
    )
    return {"id": record.id, "parents": list(record.parents), "pack_items": len(pack.items),
            "pack_tokens": pack.tokens, "in_pack": used}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="an existing store (default: a new temporary one)")
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else Store.init(Path(tempfile.mkdtemp()) / "store")
    # A long-running agent records through memdir, which updates the index at once: the walk
    # of every file that each verb would start with (to see edits made by hand) is needed at
    # most every 30 s, so the cost of a turn's context pack stays flat as the store grows.
    overrides = {
        "embeddings": {"enabled": False},
        "store": {"git_batch_seconds": 1.0, "sync_interval_seconds": 30.0},
    }
    with Memory.open(root, overrides=overrides) as mem:
        for user, message in CONVERSATION:
            thread = "support" if user == "ana" else "ops"
            turn = run_turn(mem, thread, user, message)
            print(
                f"turn {turn['id']} thread={thread} parents={len(turn['parents'])} "
                f"pack={turn['pack_items']} items/{turn['pack_tokens']} tokens"
            )
    print(f"store: {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
