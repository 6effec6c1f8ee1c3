"""The regular expressions a caller may give ``grep``: what is refused before one is compiled.

grep runs a pattern with the ``regex`` module, whose time limit stops a pattern that
backtracks but not one that allocates: ``(?R)`` calls itself at the same place without end
and grows its stack until it fails (about 540 MB, then ``MemoryError``), and a fixed count
is expanded when compiled (``a{1000000}`` takes about 260 MB before a line is read). Both
cost the same whatever the text, so :func:`check` refuses them, and the other constructs
whose cost memdir cannot bound, from the pattern's text alone:

- recursion and calls of a group (``(?R)``, ``(?0)``, ``(?1)``, ``(?-1)``, ``(?&name)``,
  ``(?P>name)``); a backreference (``\\1``, ``(?P=name)``) matches text and is kept;
- fuzzy matching (``{e<=2}``), which is not in Python's syntax either;
- the verbose flag (``(?x)``): its comments and spaces would hide counts from this check;
- a pattern longer than :data:`MAX_PATTERN_CHARS` (a huge alternation is slow to compile
  and to run), and one whose counts, multiplied out through their groups, pass
  :data:`MAX_WEIGHT` (``((a{100}){100}){100}`` is a million); only a least count is
  multiplied (``a{0,1000000}`` is a loop, ``a{1000000,}`` a million copies).

The walk over the pattern is deliberately simple and errs on the side of refusing: a
character class ends at its first unescaped ``]``, so what it reads as outside a class
is never less than what the engine reads.
"""

from __future__ import annotations

from ..errors import InvalidQuery
from ..records import recordclass
from .lazyregex import LazyRegex

MAX_PATTERN_CHARS = 2000
# Atoms after every count is multiplied out: at this limit (?:ab){10000} and a{20000} grew
# the peak RSS of one grep by 3 and 5 MB (a{1000000}: 261 MB).
MAX_WEIGHT = 20_000

_CALL = LazyRegex(r"\(\?(?:R\)|[-+]?\d+\)|&|P>)")
_FLAGS = LazyRegex(r"\(\?\^?([a-zA-Z0-9-]*)[:)]")
_HEAD = LazyRegex(r"\(\?(?:P?<\w+>|'\w+'|<[=!]|[:=!>|])")
_BRACES = LazyRegex(r"\{([^{}]*)\}")
_FUZZY = LazyRegex(r"^[\s0-9eids<=>+*,\-]*[eids][\s0-9eids<=>+*,\-]*$")
_COUNT = LazyRegex(r"^\s*(\d*)\s*(?:,\s*(\d*)\s*)?$")
# Escapes that take a braced argument: \p{Letter}, \N{name}, \x{263a}.
_BRACED_ESCAPE = frozenset("pPNxX")


@recordclass
class _Group:
    weight: int = 0
    last: int = 0  # the weight of the atom a following count repeats


def check(pattern: str) -> None:
    """Raise :class:`InvalidQuery` naming the reason when ``pattern`` may not be run."""
    if len(pattern) > MAX_PATTERN_CHARS:
        _refuse(f"it is longer than {MAX_PATTERN_CHARS} characters ({len(pattern)})")
    stack = [_Group()]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        top = stack[-1]
        if c == "\\":
            i = _after_escape(pattern, i)
            _atom(top, 1)
            continue
        if c == "[":
            i = _after_class(pattern, i)
            _atom(top, 1)
            continue
        if c == "(":
            i = _open(pattern, i, stack)
            continue
        if c == ")":
            if len(stack) > 1:
                done = stack.pop()
                _atom(stack[-1], done.weight)
            else:
                _atom(top, 1)
            i += 1
            continue
        if c == "{":
            i = _braces(pattern, i, top)
            continue
        if not c.isspace():  # "(a) {3}" repeats the group, as the verbose flag would read it
            _atom(top, 1)
        else:
            top.weight += 1
        i += 1
    total = sum(g.weight for g in stack)
    if total > MAX_WEIGHT:
        _refuse(f"its counts multiply out to {total} atoms (at most {MAX_WEIGHT})")


def _refuse(reason: str) -> None:
    raise InvalidQuery(f"grep refuses this regular expression: {reason}")


def _atom(group: _Group, weight: int) -> None:
    group.weight += weight
    group.last = weight


def _after_escape(pattern: str, i: int) -> int:
    """The index after the escape at ``i`` (``\\p{...}`` and the like with their braces)."""
    nxt = i + 2
    if i + 1 < len(pattern) and pattern[i + 1] in _BRACED_ESCAPE and pattern[nxt : nxt + 1] == "{":
        close = pattern.find("}", nxt)
        return len(pattern) if close < 0 else close + 1
    return nxt


def _after_class(pattern: str, i: int) -> int:
    """The index after the class opened at ``i``: its first ``]`` that is not escaped."""
    j = i + 1
    while j < len(pattern):
        if pattern[j] == "\\":
            j += 2
        elif pattern[j] == "]":
            return j + 1
        else:
            j += 1
    return len(pattern)


def _open(pattern: str, i: int, stack: list[_Group]) -> int:
    if _CALL.match(pattern, i):
        _refuse(
            "it calls a group or itself (recursion such as (?R), (?1) or (?&name)), "
            "whose memory has no bound"
        )
    flags = _FLAGS.match(pattern, i)
    if flags and "x" in flags.group(1).split("-")[0]:
        _refuse("the verbose flag (?x) is not supported; write the pattern without it")
    if pattern.startswith("(?#", i):
        close = pattern.find(")", i)
        return len(pattern) if close < 0 else close + 1
    stack.append(_Group())
    head = _HEAD.match(pattern, i)  # "(?:", "(?P<name>", "(?<=" ... are no atoms
    return head.end() if head else i + 1


def _braces(pattern: str, i: int, top: _Group) -> int:
    """A count (``{3}``, ``{2,5}``) multiplies the atom before it; fuzzy matching is refused."""
    found = _BRACES.match(pattern, i)
    if found is None:
        _atom(top, 1)
        return i + 1
    inside = found.group(1)
    if _FUZZY.match(inside):
        _refuse("fuzzy matching ({e<=n}) is not supported")
    count = _COUNT.match(inside)
    if count is None or not (count.group(1) or count.group(2)):
        _atom(top, found.end() - i)  # literal braces
        return found.end()
    # The engine copies an atom as often as its least count says (a{1000000} and
    # a{1000000,} are a million copies); the rest of a range is a loop and costs nothing.
    least = max(int(count.group(1) or 0), 1)
    if least > MAX_WEIGHT:
        _refuse(f"a count of {least} is over {MAX_WEIGHT}")
    top.weight += top.last * (least - 1)
    top.last *= least
    return found.end()
