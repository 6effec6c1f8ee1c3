"""``.memdir/runs.tsv``: one row per engine run (timestamp, verb, status, key=value notes)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..doc.text import read_utf8
from ..records import recordclass

HEADER = "timestamp\tverb\tstatus\tnotes\n"


@recordclass(frozen=True)
class Run:
    timestamp: str
    verb: str
    status: str
    notes: Mapping[str, str]
    raw: str


def path_of(root: Path) -> Path:
    return root / ".memdir" / "runs.tsv"


def _clean(value: Any) -> str:
    return " ".join(str(value).replace("\t", " ").split())


def format_row(verb: str, status: str, notes: Mapping[str, Any], *, head: str = "") -> str:
    """One row, newline included. ``head`` is free text written before the key=value pairs."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    parts = [_clean(head)] if head else []
    parts += [f"{k}={_clean(v).replace(' ', '_')}" for k, v in notes.items()]
    return "\t".join([stamp, _clean(verb), _clean(status), " ".join(parts)]) + "\n"


def append_row(root: Path, line: str) -> Run:
    """Append a row made by :func:`format_row` (the file and its header made if missing)."""
    target = path_of(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = not target.exists()
    with open(target, "a", encoding="utf-8") as fh:
        if fresh:
            fh.write(HEADER)
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())
    return _parse(line.rstrip("\n"))  # type: ignore[return-value]


def _parse(line: str) -> Run | None:
    cols = line.split("\t")
    if len(cols) < 4 or cols[0] == "timestamp":
        return None
    notes = {}
    for token in cols[3].split():
        key, sep, value = token.partition("=")
        if sep:
            notes[key] = value
    return Run(cols[0], cols[1], cols[2], notes, line)


def history(root: Path, verb: str | None = None) -> list[Run]:
    target = path_of(root)
    if not target.is_file():
        return []
    out = []
    for line in read_utf8(target).splitlines():
        run = _parse(line)
        if run is not None and (verb is None or run.verb == verb):
            out.append(run)
    return out


def label(previous: float | None, current: float, *, lower_is_better: bool) -> str:
    """advance / hold / regress against the previous value (hold when there is none)."""
    if previous is None or current == previous:
        return "hold"
    better = current < previous if lower_is_better else current > previous
    return "advance" if better else "regress"
