"""grep's matching: a user regex over one line at a time, in windows with a deadline, and the
part of a long line shown around its match."""

from __future__ import annotations

import time
from typing import Any

from ..errors import InvalidQuery

# A grep stops with invalid_query after this long (a pattern that backtracks without end).
GREP_SECONDS = 5.0
# A longer line is searched in windows this long, each overlapping the one before by
# GREP_OVERLAP: the engine's stack grows with its text ("(a)+c" took 377 MB over one line of
# 4 million characters), so a window bounds what one search can take.
GREP_WINDOW = 65_536
GREP_OVERLAP = 4_096


def grep_line(compiled: Any, pattern: str, line: str, deadline: float) -> tuple[int, int] | None:
    """Where ``compiled`` first matches ``line`` (searched window by window), or None."""
    start = 0
    while True:
        end = min(start + GREP_WINDOW, len(line))
        try:
            found = compiled.search(line, start, end, timeout=max(deadline - time.monotonic(), 0))
        except TimeoutError:
            raise InvalidQuery(
                f"the regular expression {pattern!r} took longer than {GREP_SECONDS:g} s "
                "(it backtracks too much); simplify it"
            ) from None
        except MemoryError:
            raise InvalidQuery(
                f"the regular expression {pattern!r} needs too much memory; simplify it"
            ) from None
        # A match that ends where a window is cut may be the cut's doing ("$" matches there):
        # the next window, which overlaps this one, decides.
        if found and (end == len(line) or found.end() < end):
            return found.start(), found.end()
        if end == len(line):
            return None
        start = end - GREP_OVERLAP


GREP_LINE_CHARS = 1000  # a longer matching line is cut to this much around its match


def around(line: str, start: int, end: int) -> str:
    """``line``, or when longer than GREP_LINE_CHARS the part around ``start:end`` with "…"
    where it was cut (a file of one huge line must not make a huge answer)."""
    if len(line) <= GREP_LINE_CHARS:
        return line
    middle = (start + min(end, start + GREP_LINE_CHARS)) // 2  # of the match's shown part
    left = min(max(middle - GREP_LINE_CHARS // 2, 0), len(line) - GREP_LINE_CHARS)
    right = left + GREP_LINE_CHARS
    return ("…" if left else "") + line[left:right] + ("…" if right < len(line) else "")


# Longest id, type, path, note or reason a merge or forget records.
