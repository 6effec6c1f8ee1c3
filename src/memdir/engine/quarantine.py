"""The quarantine queue: the sources consolidate could not file, and releasing one.

A source that fits no bundle goes to ``quarantine/`` with ``quarantine_reason``,
``quarantined_at`` and ``route_scores`` in its frontmatter, and ``quarantined_by`` when an
agent's apply packet, not the router, decided it (:func:`memdir.engine.consolidate.
quarantine`). :func:`entries` lists them; :func:`release` moves one back to ``inbox/`` with
the bundle (and topic) a person chose written into it, so the next consolidate files it
there: a bundle named by the source wins over routing.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..doc import frontmatter
from ..errors import InvalidInput, NotFound
from ..files.locks import FileLock
from ..records import recordclass
from .consolidate import free_path
from .files import Batch, markdown_under

QUARANTINE = "quarantine"
_STAMPS = ("quarantine_reason", "quarantined_at", "route_scores", "quarantined_by")


@recordclass(frozen=True)
class Entry:
    """One quarantined source."""

    path: str
    title: str
    reason: str
    quarantined_at: str
    scores: dict[str, float]
    by: str = ""  # the agent that quarantined it; empty: the router

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "title": self.title,
            "reason": self.reason,
            "quarantined_at": self.quarantined_at,
            "scores": self.scores,
            **({"quarantined_by": self.by} if self.by else {}),
        }


def entries(root: Path) -> list[Entry]:
    """Every source in ``quarantine/``, oldest first (then by path)."""
    out = []
    for rel in markdown_under(root, QUARANTINE):
        parsed = frontmatter.parse((root / rel).read_text(encoding="utf-8", errors="replace"))
        fm = parsed.fm if parsed.has_block and not parsed.error else {}
        scores = fm.get("route_scores")
        out.append(
            Entry(
                path=rel,
                title=str(fm.get("title") or fm.get("source_name") or Path(rel).stem),
                reason=str(fm.get("quarantine_reason") or "no reason recorded"),
                quarantined_at=str(fm.get("quarantined_at") or ""),
                scores={
                    str(k): float(v)
                    for k, v in (scores.items() if isinstance(scores, dict) else [])
                    if isinstance(v, int | float) and not isinstance(v, bool)
                },
                by=str(fm.get("quarantined_by") or ""),
            )
        )
    return sorted(out, key=lambda e: (e.quarantined_at, e.path))


def lock(root: Path) -> AbstractContextManager[None]:
    """The lock a release holds from reading the source to its commit."""
    return FileLock(root / ".memdir" / "locks" / "quarantine.lock", timeout=60).hold()


def release(batch: Batch, root: Path, rel: str, bundle: str, topic: str | None) -> str:
    """Move a quarantined source back to ``inbox/`` naming ``bundle`` (and ``topic``);
    returns its inbox path. The quarantine stamps go, the rest of the file stays as it was."""
    norm, target_file = batch.store.resolve(rel)  # refuses a path or link out of the store
    if not norm.startswith(QUARANTINE + "/"):
        raise InvalidInput(f"{norm} is not in {QUARANTINE}/: only a quarantined source is released")
    if not target_file.is_file():
        raise NotFound(f"no quarantined source at {norm}")
    text = target_file.read_text(encoding="utf-8")

    def mutate(fm: Any) -> None:
        for key in _STAMPS:
            if key in fm:
                del fm[key]
        fm["bundle"] = bundle
        if topic:
            fm["topic"] = topic

    new = frontmatter.edit(text, mutate)
    target = free_path(root, "inbox/" + norm.split("/", 1)[1])
    batch.write(target, new)
    batch.delete(norm)
    return target
