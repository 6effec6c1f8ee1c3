"""``memdir import claude-code|codex``: every past turn of an agent's transcripts, recorded once.

Each transcript goes through :func:`memdir.agents.record.record_transcript`, so a turn's id is
the one the hooks give it: a second import adds nothing, a grown transcript adds its new
turns, and turns the hooks recorded are not recorded again. The last turn of a transcript is
left for later while it has no answer (a session still running).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..records import field, recordclass
from . import transcripts
from .record import record_transcript

if TYPE_CHECKING:
    from ..service import Memory


def default_paths(agent: str, env: Mapping[str, str] | None = None) -> list[Path]:
    """``~/.claude/projects`` (``CLAUDE_CONFIG_DIR/projects``) or ``~/.codex/sessions``
    (``CODEX_HOME/sessions``)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home()).expanduser()
    if agent == transcripts.CLAUDE_CODE:
        base = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else home / ".claude"
        return [base / "projects"]
    base = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
    return [base / "sessions"]


def transcript_files(paths: Iterable[Path]) -> list[Path]:
    """Every ``*.jsonl`` file given, or under a folder given, in name order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.jsonl") if p.is_file()))
        elif path.is_file():
            found.append(path)
    return list(dict.fromkeys(found))


@recordclass
class Summary:
    """What an import did (or, with ``dry_run``, would do)."""

    sessions: int = 0
    turns_added: int = 0
    turns_present: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "turns_added": self.turns_added,
            "turns_present": self.turns_present,
            "skipped": self.skipped,
            "dry_run": self.dry_run,
        }


def import_transcripts(
    mem: Memory,
    agent: str,
    files: Iterable[Path],
    *,
    user: str = "",
    dry_run: bool = False,
    each: Callable[[Path], None] | None = None,
) -> Summary:
    """Record the turns of every transcript in ``files``; ``each`` is called per file."""
    summary = Summary(dry_run=dry_run)
    for path in _each(files, each):
        try:
            transcript = transcripts.read(path, agent)
        except OSError as exc:
            summary.skipped.append({"file": str(path), "reason": exc.strerror or str(exc)})
            continue
        for line, reason in transcript.skipped:
            summary.skipped.append({"file": str(path), "line": line, "reason": reason})
        if not transcript.turns:
            continue
        summary.sessions += 1
        outcome = record_transcript(mem, transcript, user=user, dry_run=dry_run)
        summary.turns_added += len(outcome.added)
        summary.turns_present += len(outcome.existing)
        for key, reason in outcome.skipped:
            summary.skipped.append({"file": str(path), "turn": key, "reason": reason})
    return summary


def _each(files: Iterable[Path], each: Callable[[Path], None] | None) -> Iterator[Path]:
    for path in files:
        yield path
        if each is not None:
            each(path)
