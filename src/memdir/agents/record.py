"""A transcript's turns recorded through :class:`memdir.Memory`, each exactly once.

A turn's id is derived from what names it in the transcript (:func:`turn_id`: the time of its
prompt, then a hash of the agent, the session and the turn's key), so whoever records it, a
Stop hook that fires twice, two hooks at once, an import after the hooks, names the same
file; a turn whose record exists is not written again. Its fields:

- thread: the session id; channel: the agent (``claude-code``, ``codex``); user: the user;
- input, output, the work log: :class:`memdir.agents.transcripts.Turn`;
- parents: the previous turn of the session (when recorded), then every turn the agent read
  through memdir during the turn (:meth:`Turn.read_turns`) that the store holds, then every
  document it read that way (:meth:`Turn.read_documents`: an article, an episode, a source)
  that is a markdown file of the store in its own name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..doc.ids import derived_id
from ..doc.turnrecord import MAX_PARENTS, parent_path, turn_path
from ..errors import MemdirError
from ..records import field, recordclass
from .transcripts import Transcript, Turn

if TYPE_CHECKING:
    from ..service import Memory


OVER = "over"
ANSWERED = "answered"
OPEN = "open"


@recordclass
class Outcome:
    """What recording a transcript did: ids added, ids already there, turns skipped."""

    added: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (turn key, reason)
    # The first turn left to record later (not over, or refused), and the turn before it:
    # where the next read of the transcript can start (None: after the last turn).
    left: Turn | None = None
    previous: str | None = None

    def leave(self, turn: Turn, previous: str | None) -> None:
        """Note ``turn`` as left for later (the first one noted is where to start again)."""
        if self.left is None:
            self.left, self.previous = turn, previous


def turn_id(agent: str, session: str, turn: Turn) -> str:
    """The id of ``turn``: the same for every reader of the same transcript."""
    return derived_id(turn.started_ms, f"{agent}\n{session}\n{turn.key}")


def record_transcript(
    mem: Memory,
    transcript: Transcript,
    *,
    user: str = "",
    last_output: str | None = None,
    last: str = ANSWERED,
    dry_run: bool = False,
    progress: Callable[[], None] | None = None,
    previous: str | None = None,
) -> Outcome:
    """Record every turn of ``transcript`` the store does not hold yet, oldest first.

    ``last_output`` (a Stop hook's ``last_assistant_message``) is the answer of the last
    turn. ``last`` says what to do with the last turn: :data:`OVER` records it (a Stop: the
    turn is over), :data:`ANSWERED` records it once it has an answer (an import: a session
    still running is picked up by the next import), :data:`OPEN` leaves it (a PreCompact or
    a SubagentStop comes in the middle of a turn). ``previous``: the session's turn before
    the transcript's first (when only its tail was read).
    """
    out = Outcome()
    if previous is not None and not mem.store.exists(turn_path(previous)):
        previous = None
    count = len(transcript.turns)
    for at, turn in enumerate(transcript.turns):
        if progress is not None:
            progress()
        ident = turn_id(transcript.agent, transcript.session, turn)
        if mem.store.exists(turn_path(ident)):
            out.existing.append(ident)
            previous = ident
            continue
        output = turn.output
        final = at == count - 1
        if final and last_output and last_output.strip():
            output = last_output
        if final and (last == OPEN or (last == ANSWERED and not output.strip())):
            out.skipped.append((turn.key, "not over yet"))
            out.leave(turn, previous)
            continue
        if not output.strip() and not turn.worklog:
            # A prompt the agent never answered nor worked on (interrupted, or a local
            # command such as /compact): nothing happened that memory could use.
            out.skipped.append((turn.key, "no answer"))
            continue
        parents = _parents(mem, previous, turn, ident)
        if not dry_run:
            try:
                _record(mem, transcript, turn, ident, output, parents, user)
            except MemdirError as exc:
                # One turn memdir refuses (text no file can hold, a work log too large)
                # must not keep every later turn of the session out.
                out.skipped.append((turn.key, f"refused: {exc.message}"))
                out.leave(turn, previous)
                continue
        out.added.append(ident)
        previous = ident
    if out.left is None:
        out.previous = previous
    return out


def _parents(mem: Memory, previous: str | None, turn: Turn, ident: str) -> list[str]:
    found = [previous] if previous else []
    for ref in turn.read_turns():
        if ref not in found and ref != ident and mem.store.exists(turn_path(ref)):
            found.append(ref)
    for ref in turn.read_documents():
        rel = _document(mem, ref)
        if rel is not None and rel not in found:
            found.append(rel)
    return found[:MAX_PARENTS]


def _document(mem: Memory, ref: str) -> str | None:
    """``ref`` as a document parent: its normal path when it names a markdown file of the
    store in its own name (as :meth:`memdir.Memory.record_turn` accepts), else None."""
    try:
        rel = parent_path(ref)
        if mem.store.exists(rel) and mem.store.resolve(rel)[0] == rel:
            return rel
    except MemdirError:  # outside the store, a private folder, not a .md file
        pass
    return None


def _record(
    mem: Memory,
    transcript: Transcript,
    turn: Turn,
    ident: str,
    output: str,
    parents: list[str],
    user: str,
) -> None:
    from ..errors import Conflict

    log = _fitting(turn.worklog, mem.settings.store.max_file_bytes)
    try:
        mem.record_turn(
            thread=transcript.session,
            input=turn.prompt,
            output=output,
            worklog=log or None,
            user=user,
            channel=transcript.agent,
            parents=parents,
            actor=transcript.agent,
            id=ident,
        )
    except Conflict:
        if not mem.store.exists(turn_path(ident)):
            raise  # another conflict than the record being there already


def _fitting(lines: list[bytes], limit: int) -> bytes:
    """The work log's lines, each whole, as many as the store's file size limit holds."""
    kept: list[bytes] = []
    size = 0
    for raw in lines:
        line = raw if raw.endswith(b"\n") else raw + b"\n"
        if size + len(line) > limit:
            break
        kept.append(line)
        size += len(line)
    return b"".join(kept)
