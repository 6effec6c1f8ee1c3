"""A transcript's turns recorded through :class:`memdir.Memory`, each exactly once.

A turn's id is derived from what names it in the transcript (:func:`turn_id`: the time of its
prompt, then a hash of the agent, the session and the turn's key), so whoever records it, a
Stop hook that fires twice, two hooks at once, an import after the hooks, names the same
file; a turn whose record exists is not written again. A turn keyed on its prompt id is
also found when the other reader recorded it (the spool dates a prompt by when its hook ran,
the transcript by its record: the ids differ in their time, not in their hash), and one
recorded under its key of before (:attr:`Turn.legacy_key`) too (:func:`recorded_as`). Its
fields:

- thread: the session id; channel: the agent (``claude-code``, ``codex``); user: the user;
- input, output, the work log: :class:`memdir.agents.transcripts.Turn`;
- parents: the previous turn of the session (when recorded), then every turn the agent read
  through memdir during the turn (:meth:`Turn.read_turns`) that the store holds, then every
  document it read that way (:meth:`Turn.read_documents`: an article, an episode, a source)
  that is a markdown file of the store in its own name.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..doc.ids import TIME_CHARS, derived_id
from ..doc.turnrecord import MAX_PARENTS, parent_path, turn_path
from ..errors import Conflict, MemdirError
from ..records import field, recordclass, replace
from .transcripts import PROMPT_KEY, Transcript, Turn

if TYPE_CHECKING:
    from ..service import Memory
    from ..turns.verbs import PreparedTurn


# Turns written together (one journal sync, one index update, one commit): an import of a
# long session is not one sync per turn, and a kill loses at most a batch not yet written.
BATCH_TURNS = 64

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
    batch: list[PreparedTurn] = []
    ahead: set[str] = set()  # the ids of the batch
    listed: dict[str, set[str]] = {}  # a day's folder of turns -> the ids it holds
    for at, turn in enumerate(transcript.turns):
        if progress is not None:
            progress()
        ident = turn_id(transcript.agent, transcript.session, turn)
        held = ident if ident in ahead else recorded_as(mem, transcript, turn, ident, listed)
        if held is not None:
            out.existing.append(held)
            previous = held
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
        parents = _parents(mem, previous, turn, ident, ahead)
        if not dry_run:
            try:
                batch.append(_prepare(mem, transcript, turn, ident, output, parents, user, batch))
            except Conflict:
                if not mem.store.exists(turn_path(ident)):
                    raise  # another conflict than the record being there already
                out.existing.append(ident)  # another process recorded it just now
                previous = ident
                continue
            except MemdirError as exc:
                # One turn memdir refuses (text no file can hold, a work log too large)
                # must not keep every later turn of the session out.
                out.skipped.append((turn.key, f"refused: {exc.message}"))
                out.leave(turn, previous)
                continue
            ahead.add(ident)
        out.added.append(ident)
        previous = ident
        if len(batch) >= BATCH_TURNS:
            _write(mem, transcript, batch, out)
            batch, ahead = [], set()
    _write(mem, transcript, batch, out)
    if out.left is None:
        out.previous = previous
    return out


DAY_MS = 86_400_000
NEAR_MIDNIGHT_MS = 3_600_000  # a prompt this near a day's end may be dated the next day


def recorded_as(
    mem: Memory,
    transcript: Transcript,
    turn: Turn,
    ident: str,
    listed: dict[str, set[str]] | None = None,
) -> str | None:
    """The id the store holds ``turn`` under, or None: ``ident`` itself; the id of its
    ``legacy_key``; or, for a turn keyed on its prompt id, a turn of the same hash (agent,
    session, prompt id) on the day of its time or, near midnight, the day beside it (the
    spool and the transcript date one prompt a few seconds apart). ``listed`` caches the
    day folders read."""
    if mem.store.exists(turn_path(ident)):
        return ident
    if turn.legacy_key:
        old = turn_id(transcript.agent, transcript.session, replace(turn, key=turn.legacy_key))
        if mem.store.exists(turn_path(old)):
            return old
    if not turn.key.startswith(PROMPT_KEY):
        return None
    listed = {} if listed is None else listed
    tail = ident[TIME_CHARS:]
    offsets = [0]
    within = turn.started_ms % DAY_MS
    if within < NEAR_MIDNIGHT_MS:
        offsets.append(-DAY_MS)
    elif within > DAY_MS - NEAR_MIDNIGHT_MS:
        offsets.append(DAY_MS)
    for offset in offsets:
        folder = posixpath.dirname(turn_path(derived_id(turn.started_ms + offset, "")))
        if folder not in listed:
            try:
                names = os.listdir(mem.store.root / folder)
            except OSError:
                names = []
            listed[folder] = {n[: -len(".md")] for n in names if n.endswith(".md")}
        for other in listed[folder]:
            if other.endswith(tail) and len(other) == len(ident):
                return other
    return None


def _write(mem: Memory, transcript: Transcript, batch: list[PreparedTurn], out: Outcome) -> None:
    """Write the batch together; should the store refuse it, each turn on its own, so one
    refused turn keeps no other out (a turn that named it as its parent names the refused
    turn's parents instead, as when the turn is refused before it joins a batch)."""
    if not batch:
        return
    try:
        mem.turns.write_turns(batch, actor=transcript.agent)
        return
    except MemdirError:
        pass
    instead: dict[str, list[str]] = {}  # refused id -> the parents it had
    for prepared in batch:
        ready, record = prepared, prepared.record
        if mem.store.exists(ready.path):
            continue  # written before the batch failed, or by another process meanwhile
        if any(p in instead for p in record.parents):
            parents: list[str] = []
            for p in record.parents:
                parents += instead.get(p, [p])
            ready = mem.turns.prepare_turn(
                thread=record.thread,
                input=record.input,
                output=record.output,
                worklog=next((raw for rel, raw in ready.files if rel != ready.path), None),
                user=record.user,
                channel=record.channel,
                parents=list(dict.fromkeys(parents)),
                keywords=record.keywords,
                id=record.id,
            )
        try:
            mem.turns.write_turns([ready], actor=transcript.agent)
        except MemdirError as exc:
            instead[record.id] = list(ready.record.parents)  # as rewritten above, if it was
            out.added.remove(record.id)
            out.skipped.append((record.id, f"refused: {exc.message}"))


def _parents(
    mem: Memory, previous: str | None, turn: Turn, ident: str, ahead: set[str]
) -> list[str]:
    found = [previous] if previous else []
    for ref in turn.read_turns():
        if ref in found or ref == ident:
            continue
        if ref in ahead or mem.store.exists(turn_path(ref)):
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


def _prepare(
    mem: Memory,
    transcript: Transcript,
    turn: Turn,
    ident: str,
    output: str,
    parents: list[str],
    user: str,
    batch: list[PreparedTurn],
) -> PreparedTurn:
    log = _fitting(turn.worklog, mem.settings.store.max_file_bytes)
    return mem.turns.prepare_turn(
        thread=transcript.session,
        input=turn.prompt,
        output=output,
        worklog=log or None,
        user=user,
        channel=transcript.agent,
        parents=parents,
        id=ident,
        batch=batch,
    )


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
