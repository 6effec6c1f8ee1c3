"""A small real store for the web UI's tests: a bundle with linked wiki pages, a page
outside it, a thread of three turns (a DAG), a quarantined source, two refine runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers import BREAD
from memdir.files.store import Store
from memdir.http.app import create_app
from memdir.http.command import server_settings
from memdir.service import Memory

OFFLINE = {"embeddings": {"enabled": False}}
VAT = ("vat.md", "The quarterly VAT return is due a month after the quarter ends.\n")
RYE = (
    "---\ntitle: Rye bread\nrelated: [crumb]\n---\n# Rye bread\n\n"
    "Rye needs a lively [[starter|sourdough starter]] and a long proof; see "
    "[the crumb](crumb.md).\n\n<script>alert('rye')</script>\n\n"
    "[click me](javascript:alert(1)) and ![pixel](data:image/svg+xml,x) "
    '<img src=x onerror="alert(2)">\n'
)
STARTER = "# Starter\n\nFeed the starter flour and water every day.\n"
CRUMB = "# Crumb\n\nAn open crumb comes from a wet dough and a hot oven.\n"
SECRET = "# Vault\n\nThe vault code is swordfish.\n"


@dataclass
class UIStore:
    root: Path
    turns: list[str]  # oldest first: t1 <- t2 <- t3 (t3 also names the rye page)


def build(parent: Path) -> UIStore:
    root = Store.init(parent / "store")
    with Memory.open(root, overrides=OFFLINE) as mem:
        mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, yeast, oven")
        mem.bundle_add("money", "household money: bills and budget")
        mem.ingest([VAT, ("bread.md", BREAD)])
        mem.consolidate()
        mem.write("wiki/kitchen/notes/rye.md", RYE, actor="ana")
        mem.write("wiki/kitchen/notes/starter.md", STARTER, actor="ana")
        mem.write("wiki/kitchen/notes/crumb.md", CRUMB, actor="ana")
        mem.write("wiki/kitchen/notes/starter.md", STARTER + "\nKeep it warm.\n", actor="bo")
        mem.write("private/vault.md", SECRET, actor="ana")
        t1 = mem.record_turn(
            thread="t1",
            user="ana",
            input="How do I feed the starter?",
            output="Equal weights of flour and water.",
            worklog=[{"tool": "grep", "args": "starter", "result": "2 hits"}],
        )
        t2 = mem.record_turn(
            thread="t1",
            user="ana",
            input="And for rye?",
            output="Rye likes it wetter.",
            parents=[t1.id],
        )
        t3 = mem.record_turn(
            thread="t1",
            user="ana",
            input="How long to proof?",
            output="Overnight, cold.",
            parents=[t2.id, "wiki/kitchen/notes/rye.md"],
        )
        mem.refine()
        mem.refine()
    return UIStore(root, [t1.id, t2.id, t3.id])


def opener(name: str, path: Path) -> Any:
    """Open one store of a many-store server the way `memdir serve --store` does, offline."""
    found, settings = server_settings(str(path))
    return create_app(Memory.open(found, settings=settings.replace(**OFFLINE)))
