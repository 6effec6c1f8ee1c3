"""Time-sortable unique ids (ULID-style, Crockford base32).

48 bits of milliseconds then 80 bits that are random for the first id of a
millisecond and incremented after it, so ids made by one process are strictly
increasing and ids made by concurrent processes collide with negligible odds.
"""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id(now_ms: int | None = None) -> str:
    """A 26-character lowercase ULID; lexical order is creation order."""
    global _last_ms, _last_rand
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms <= _last_ms:
            ms = _last_ms
            _last_rand += 1
        else:
            _last_rand = int.from_bytes(os.urandom(10), "big") >> 1
        _last_ms = ms
        return _encode(ms, 10) + _encode(_last_rand & ((1 << 80) - 1), 16)


def id_time_ms(ident: str) -> int:
    """Milliseconds since the epoch encoded in an id made by :func:`new_id`."""
    value = 0
    for ch in ident[:10].lower():
        value = value * 32 + _ALPHABET.index(ch)
    return value


TIME_CHARS = 10  # an id's first characters, its time; the rest is random or a hash


def derived_id(ms: int, key: str) -> str:
    """The id for the thing named ``key`` at ``ms``: the same inputs always give the same id.

    For records made again from a source that does not change (an agent's transcript), so
    that making one twice, in two processes at once or in two runs, names one file. The
    80 bits after the time are taken from a SHA-256 of ``key``.
    """
    import hashlib

    digest = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:10], "big")
    return _encode(max(ms, 0) & ((1 << 48) - 1), TIME_CHARS) + _encode(digest, 16)


def random_tag(length: int = 4) -> str:
    """``length`` random base32 characters (a name's part that no other machine repeats)."""
    return _encode(int.from_bytes(os.urandom(8), "big"), length)


def day_tag(now_ms: int | None = None) -> str:
    """Nine base32 characters: the milliseconds since the UTC day began (six, so names of one
    day sort in the order they were made), then three random ones. What makes a name that
    carries a date or a slug unique beyond its store: two stores synced over git never name
    their episodes alike."""
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return _encode(ms % 86_400_000, 6) + random_tag(3)
