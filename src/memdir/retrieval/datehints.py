"""Dates named in a query, as time windows, and how close a timestamp is to them.

A question such as "what did Maria start on 3 June, 2023?" or "where did Joanna
travel in July 2022?" names when the memory was made. :func:`windows` finds such
dates (a day; a week, a part or a month of a year; a season; a year; a month
with no year, placed in each year the caller names) and :func:`closeness` scores
a document's ``created`` time against them: 1 inside a window, falling off with
the distance in days outside it. Pure logic, no storage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from ..records import recordclass

_NAMES = "january february march april may june july august september october november december"
_MONTHS = {name: number for number, name in enumerate(_NAMES.split(), start=1)}
_MONTH = (
    r"(january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
)
_ORD = r"(?:st|nd|rd|th)?"
_DAY_MONTH_YEAR = re.compile(rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?{_MONTH},?\s+(\d{{4}})\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+(\d{{1,2}}){_ORD}(?:,\s*|\s+)(\d{{4}})\b", re.I)
_YEAR = r"(?:,?\s+(?:of\s+)?(\d{4}))"
# "the second week of November 2023", "the last week of May": a week of a month.
_WEEK_OF = re.compile(
    rf"\b(first|1st|second|2nd|third|3rd|fourth|4th|last|final)\s+week\s+of\s+{_MONTH}{_YEAR}?",
    re.I,
)
# "early June 2023", "mid-July", "late in August 2022": a third of a month.
_PART_OF = re.compile(rf"\b(early|mid|middle|late)(?:-|\s+)(?:in\s+|of\s+)?{_MONTH}{_YEAR}?", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+(\d{{4}})\b", re.I)
# "summer 2021", "the winter of 2022": a season of the northern hemisphere.
_SEASON_YEAR = re.compile(r"\b(spring|summer|autumn|fall|winter)\s+(?:of\s+)?(\d{4})\b", re.I)
# A month with no year needs a word before it: "in June", "during May" ("may I" is no month).
_BARE_MONTH = re.compile(rf"\b(?:in|during|since|by|of|last|this|next)\s+{_MONTH}(?!\w)", re.I)
# A year alone, after a word that makes it a date: "in 2022", "since 2019".
_BARE_YEAR = re.compile(r"\b(?:in|during|since|by|of|year)\s+(\d{4})\b", re.I)
_WEEKS = {"first": 0, "1st": 0, "second": 1, "2nd": 1, "third": 2, "3rd": 2, "fourth": 3, "4th": 3}
_PARTS = {"early": (1, 11), "mid": (11, 21), "middle": (11, 21), "late": (21, 32)}
_SEASONS = {"spring": (3, 6), "summer": (6, 9), "autumn": (9, 12), "fall": (9, 12)}
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


@recordclass(frozen=True)
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
        return Window(start, start + timedelta(days=1))
    except (ValueError, OverflowError):  # no such day, or its end is past year 9999
        return None


def _month_window(year: int, month: int) -> Window:
    start = datetime(year, month, 1, tzinfo=UTC)
    return Window(start, datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=UTC))


def _days(year: int, month: int, first: int, last: int | None) -> Window:
    """Days ``first`` to ``last`` (None: the month's end) of a month, as one window."""
    whole = _month_window(year, month)
    start = whole.start + timedelta(days=first - 1)
    end = whole.end if last is None else min(whole.end, whole.start + timedelta(days=last - 1))
    return Window(start, end)


def _years(found: str | None, fallback: tuple[int, ...]) -> tuple[int, ...]:
    if found is not None:
        year = int(found)
        return (year,) if 1 <= year <= 9998 else ()
    return fallback


def names_a_date(query: str) -> bool:
    """Whether the query holds anything :func:`windows` reads (a cheap test before it)."""
    return any(
        pattern.search(query)
        for pattern in (
            _DAY_MONTH_YEAR,
            _MONTH_DAY_YEAR,
            _ISO_DAY,
            _WEEK_OF,
            _PART_OF,
            _MONTH_YEAR,
            _SEASON_YEAR,
            _BARE_MONTH,
            _BARE_YEAR,
        )
    )


def windows(query: str, years: Iterable[int] = ()) -> list[Window]:
    """The dates a query names, as windows.

    Understood: a day (``3 June, 2023``, ``June 3 2023``, ``2023-06-03``), a week
    of a month (``the second week of November 2023``), a part of a month
    (``early June 2023``), a month (``July 2022``), a season (``summer 2021``, of the
    northern hemisphere) and a year after a preposition (``in 2022``). A week, part
    or month named with no year (``in June``) is placed in each of ``years``, the
    years the caller searches (none: it names nothing).
    """
    found: list[Window] = []
    taken: list[tuple[int, int]] = []
    placed = tuple(sorted({int(y) for y in years if 1 <= int(y) <= 9998}))

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
    for match in _WEEK_OF.finditer(query):
        if free(match.span()):
            taken.append(match.span())
            which, month = match[1].lower(), _month(match[2])
            for year in _years(match[3], placed):
                if which in _WEEKS:
                    first = 1 + 7 * _WEEKS[which]
                    found.append(_days(year, month, first, first + 7))
                else:  # the last seven days
                    end = _month_window(year, month).end
                    found.append(Window(end - timedelta(days=7), end))
    for match in _PART_OF.finditer(query):
        if free(match.span()):
            taken.append(match.span())
            first, last = _PARTS[match[1].lower()]
            for year in _years(match[3], placed):
                found.append(_days(year, _month(match[2]), first, None if last > 31 else last))
    for match in _MONTH_YEAR.finditer(query):
        if free(match.span()):
            year, month = int(match[2]), _month(match[1])
            if not 1 <= year <= 9998:
                continue
            found.append(_month_window(year, month))
            taken.append(match.span())
    for match in _SEASON_YEAR.finditer(query):
        if free(match.span()):
            taken.append(match.span())
            season, year = match[1].lower(), int(match[2])
            if not 1 <= year <= 9998:
                continue
            if season in _SEASONS:
                first, stop = _SEASONS[season]
                found.append(
                    Window(_month_window(year, first).start, _month_window(year, stop).start)
                )
            else:  # winter: the cold months of that calendar year
                found.append(Window(_month_window(year, 1).start, _month_window(year, 3).start))
                found.append(_month_window(year, 12))
    for match in _BARE_MONTH.finditer(query):
        if free(match.span()):
            taken.append(match.span())
            found.extend(_month_window(year, _month(match[1])) for year in placed)
    for match in _BARE_YEAR.finditer(query):
        if free(match.span()):
            taken.append(match.span())
            year = int(match[1])
            if 1 <= year <= 9998:
                found.append(
                    Window(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))
                )
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
