"""Dates named in a query, as time windows, and how close a timestamp is to them.

A question such as "what did Maria start on 3 June, 2023?" or "where did Joanna
travel in July 2022?" names when the memory was made. :func:`windows` finds such
dates (a day, or a month of a year) and :func:`closeness` scores a document's
``created`` time against them: 1 inside a window, falling off with the distance
in days outside it. Pure logic, no storage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_NAMES = "january february march april may june july august september october november december"
_MONTHS = {name: number for number, name in enumerate(_NAMES.split(), start=1)}
_MONTH = (
    r"(january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
)
_ORD = r"(?:st|nd|rd|th)?"
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}}){_ORD},?\s+(\d{{4}})\b", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.I)
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


@dataclass(frozen=True)
class Window:
    """A half-open UTC time range ``[start, end)`` named by the query."""

    start: datetime
    end: datetime


def _month(name: str) -> int:
    name = name.lower().rstrip(".")
    if name in _MONTHS:
        return _MONTHS[name]
    return next(n for full, n in _MONTHS.items() if full.startswith(name[:3]))


def _day(year: int, month: int, day: int) -> Window | None:
    try:
        start = datetime(year, month, day, tzinfo=UTC)
    except ValueError:
        return None
    return Window(start, start + timedelta(days=1))


def windows(query: str) -> list[Window]:
    """The days and months a query names (``3 June, 2023``, ``June 3 2023``, ``July 2022``...)."""
    found: list[Window] = []
    taken: list[tuple[int, int]] = []

    def free(span: tuple[int, int]) -> bool:
        return not any(a < span[1] and span[0] < b for a, b in taken)

    # (pattern, group of the year, of the month, of the day)
    days = ((_DAY_MONTH_YEAR, 3, 2, 1), (_MONTH_DAY_YEAR, 3, 1, 2), (_ISO_DAY, 1, 2, 3))
    for pattern, y, m, d in days:
        for match in pattern.finditer(query):
            if free(match.span()):
                # A day that does not exist names nothing (its month is not a hint either).
                taken.append(match.span())
                month = match[m]
                number = int(month) if month.isdigit() else _month(month)
                win = _day(int(match[y]), number, int(match[d]))
                if win:
                    found.append(win)
    for match in _MONTH_YEAR.finditer(query):
        if free(match.span()):
            year, month = int(match[2]), _month(match[1])
            if not 1 <= year <= 9998:
                continue
            start = datetime(year, month, 1, tzinfo=UTC)
            end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC)
            found.append(Window(start, end))
            taken.append(match.span())
    return found


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 / ISO 8601 timestamp (``Z`` allowed) as an aware datetime; None if unparsed."""
    if not value:
        return None
    text = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def closeness(when: datetime, found: list[Window], scale_days: float) -> float:
    """1 inside a window, ``1 / (1 + days_outside / scale_days)`` outside; the best window wins."""
    best = 0.0
    for win in found:
        if win.start <= when < win.end:
            return 1.0
        edge = win.start if when < win.start else win.end
        gap = abs((when - edge).total_seconds()) / 86400
        best = max(best, 1.0 / (1.0 + gap / max(scale_days, 1e-9)))
    return best
