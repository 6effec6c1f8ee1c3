"""cl100k_base token counts in plain Python, without building tiktoken's encoder.

tiktoken needs about 0.3 s to read the 100,256 ranks of the vocabulary and build its
encoder: most of the time a ``memdir hook`` process would spend. This module counts the
same tokens from a lookup table that is made once from the shipped vocabulary and kept in
the cache folder (``$XDG_CACHE_HOME/memdir``, else ``~/.cache/memdir``; made again when
missing or damaged, and held in memory only when that folder cannot be written). Opening it
takes a millisecond or two.

The count is tiktoken's, step by step:

1. The text is cut into pieces by the encoding's split pattern (``CL100K_SPLIT``). That
   pattern only asks of a character whether it is a letter (``\\p{L}``), a number
   (``\\p{N}``), white space, a line end, a space or an apostrophe, so every character
   beyond ASCII is replaced by an ASCII one of its class and the pattern is matched in
   ASCII terms with the standard library's ``re`` (whose ``$`` and ``\\s`` differ from the
   Rust engine's and are not used).
2. A piece that is a token counts one; any other is merged byte pair by byte pair, lowest
   rank first and leftmost on a tie, as tiktoken merges it; the count is the parts left.

Text this cannot classify for certain (a character the Python's Unicode tables do not
know, a lone surrogate, or a letter that case-folds to ASCII, which the pattern's
``(?i:...)`` would match), and text with a piece of more than ``LONGEST_PIECE`` bytes, is
left to tiktoken itself: :meth:`Counter.count` returns ``None``.
"""

from __future__ import annotations

import os
import struct
import unicodedata
import zlib
from functools import lru_cache
from pathlib import Path

from .lazyregex import LazyRegex

# The body is checked against a CRC-32 on every load (accidental damage: a table is written
# whole, then renamed), and the vocabulary it was made from by the size and mtime it had then
# (its SHA-256 was checked when the table was made): hashing the 2 MB of each, and the hashlib
# import that needs, cost every hook process about 5 ms.
FORMAT = b"memdir-cl100k-table-3\n"
# source sha256, body crc32, tokens, slots, blob bytes, source size, source mtime (ns)
_HEAD = struct.Struct("<32sIIIIQq")
_WS = "\t\n\x0b\x0c\r "
# Unicode White_Space beyond ASCII (the property the Rust engine's \s follows).
_WHITE_SPACE = frozenset(
    "\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
# cl100k's split pattern over the ASCII stand-ins: letters [A-Za-z], numbers [0-9], white
# space _WS; "\Z" is the Rust engine's "$" (end of text only).
_SPLIT = LazyRegex(
    r"'(?i:[sdmt]|ll|ve|re)"
    r"|[^\r\nA-Za-z0-9]?+[A-Za-z]++"
    r"|[0-9]{1,3}+"
    rf"| ?[^{_WS}A-Za-z0-9]++[\r\n]*+"
    rf"|[{_WS}]++\Z"
    rf"|[{_WS}]*[\r\n]"
    rf"|[{_WS}]+(?![^{_WS}])"
    rf"|[{_WS}]"
)
_UNSURE = "\x00"  # what stands for a character that cannot be classified
# Longer pieces (a run of letters or symbols with no space, a pasted blob) are left to
# tiktoken: merging them pair by pair in Python takes time quadratic in their length.
LONGEST_PIECE = 256


@lru_cache(maxsize=8192)
def _stand_in(char: str) -> str:
    """An ASCII character of the same class as ``char`` for the split pattern."""
    if char in _WHITE_SPACE:
        return "\x0b"  # white space, not a line end and not the pattern's literal space
    cat = unicodedata.category(char)
    if cat in ("Cn", "Cs"):
        return _UNSURE
    if cat[0] == "L":
        if any(c.isascii() for c in (char.lower(), char.upper(), char.casefold())):
            return _UNSURE  # e.g. the long s, which (?i:s) matches
        return "a"
    if cat[0] == "N":
        return "0"
    return "!"


class Table:
    """The vocabulary as an open-addressing hash table over token bytes."""

    def __init__(self, data: bytes) -> None:
        start = len(FORMAT) + _HEAD.size
        if not data.startswith(FORMAT) or len(data) < start:
            raise ValueError("not a cl100k table")
        source_sha, body_crc, n, slots, blob, size, mtime_ns = _HEAD.unpack_from(data, len(FORMAT))
        body = memoryview(data)[start:]
        if len(body) != 4 * (n + 1) + 4 * slots + blob or slots & (slots - 1):
            raise ValueError("the cl100k table has the wrong size")
        if zlib.crc32(body) != body_crc:
            raise ValueError("the cl100k table is damaged")
        self.offsets = body[: 4 * (n + 1)].cast("I")
        self.slots = body[4 * (n + 1) : 4 * (n + 1) + 4 * slots].cast("I")
        self.blob = bytes(body[4 * (n + 1) + 4 * slots :])
        self.mask = slots - 1
        self.data = data
        self.source = (source_sha, size, mtime_ns)

    def rank(self, token: bytes) -> int | None:
        """The rank of ``token`` (None: not a token)."""
        slots, offsets, blob, mask = self.slots, self.offsets, self.blob, self.mask
        h = zlib.crc32(token) & mask
        while True:
            entry: int = slots[h]
            if entry == 0:
                return None
            r = entry - 1
            if blob[offsets[r] : offsets[r + 1]] == token:
                return r
            h = (h + 1) & mask

    @staticmethod
    def build(vocabulary: bytes, source_sha: bytes, stamp: tuple[int, int] = (0, 0)) -> bytes:
        """The table's file from the ``.tiktoken`` file (ranks 0, 1, 2, ... in order) whose
        size and mtime are ``stamp``."""
        import binascii

        fields = vocabulary.split()
        tokens = [binascii.a2b_base64(t) for t in fields[0::2]]
        if fields[1::2] != [str(i).encode() for i in range(len(tokens))]:
            raise ValueError("the vocabulary's ranks are not 0, 1, 2, ... in order")
        slots = 1 << max(len(tokens) * 2, 1).bit_length()
        mask = slots - 1
        table = [0] * slots
        offsets = [0]
        for rank, token in enumerate(tokens):
            offsets.append(offsets[-1] + len(token))
            h = zlib.crc32(token) & mask
            while table[h]:
                h = (h + 1) & mask
            table[h] = rank + 1
        body = (
            struct.pack(f"<{len(offsets)}I", *offsets)
            + struct.pack(f"<{slots}I", *table)
            + b"".join(tokens)
        )
        head = _HEAD.pack(source_sha, zlib.crc32(body), len(tokens), slots, offsets[-1], *stamp)
        return FORMAT + head + body


def cache_folder() -> Path | None:
    """Where the table is kept: ``$XDG_CACHE_HOME/memdir``, else ``~/.cache/memdir``. A
    relative ``XDG_CACHE_HOME`` is ignored, as the XDG rules say (a hook runs in whatever
    folder the agent is in, and would leave a cache in each)."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if base and os.path.isabs(base):
        return Path(base) / "memdir"
    try:
        return Path.home() / ".cache" / "memdir"
    except RuntimeError:
        return None


def load_table(vocabulary: Path, sha256: str) -> Table:
    """The table for ``vocabulary`` (whose sha256 must be ``sha256``): from the cache when it
    was made from the file as it is (the same size and mtime), else made from the file
    (ValueError when the file is not the one expected) and cached."""
    folder = cache_folder()
    # The format and the vocabulary file's stamp are in the name: processes of two copies of
    # memdir (a checkout beside an installed copy, two versions) would otherwise each refuse
    # the other's table and make their own again, every time.
    st = vocabulary.stat()
    stamp = (st.st_size, st.st_mtime_ns)
    version = FORMAT.rstrip(b"\n").rsplit(b"-", 1)[1].decode()
    name = f"cl100k-{sha256[:16]}-v{version}-{stamp[0]}-{stamp[1]}.table"
    path = folder / name if folder is not None else None
    if path is not None:
        try:
            table = Table(path.read_bytes())
        except (OSError, ValueError):
            pass
        else:
            if table.source == (bytes.fromhex(sha256), *stamp):
                return table
    import hashlib  # only to make the table

    data = vocabulary.read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"hash mismatch for {vocabulary}")
    made = Table.build(data, bytes.fromhex(sha256), stamp)
    if path is not None:
        _write(path, made)
    return Table(made)


def _write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (another process may be writing it too)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        import tempfile  # not at the top: a hook needs none (test_hook_imports)

        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # kept in memory only: the next process makes it again


class Counter:
    """Counts cl100k tokens with a :class:`Table`; pieces are counted once per process."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.pieces: dict[str, int] = {}

    def count(self, text: str) -> int | None:
        """The number of tokens of ``text`` (None: text to be counted by tiktoken)."""
        if text.isascii():
            mapped = text
        else:
            mapped = "".join(c if c.isascii() else _stand_in(c) for c in text)
            if _UNSURE in mapped and any(not c.isascii() and _stand_in(c) == _UNSURE for c in text):
                return None
        known = self.pieces
        total = 0
        for match in _SPLIT.finditer(mapped):
            piece = text[match.start() : match.end()]
            n = known.get(piece)
            if n is None:
                data = piece.encode("utf-8")
                if len(data) > LONGEST_PIECE:
                    return None  # merging here is quadratic in the piece: tiktoken's work
                n = self._piece(data)
                if len(known) < 100_000:
                    known[piece] = n
            total += n
        return total

    def _piece(self, data: bytes) -> int:
        rank = self.table.rank
        if len(data) == 1 or rank(data) is not None:
            return 1
        # Byte pair merging as tiktoken does it: parts[i] = (start, rank of the pair that
        # begins there); merge the lowest rank, leftmost first, until no pair is a token.
        none = 1 << 62
        parts: list[tuple[int, int]] = []
        for i in range(len(data) - 1):
            found = rank(data[i : i + 2])
            parts.append((i, none if found is None else found))
        parts.append((len(data) - 1, none))
        parts.append((len(data), none))

        def pair(i: int) -> int:
            if i + 3 < len(parts):
                found = rank(data[parts[i][0] : parts[i + 3][0]])
                return none if found is None else found
            return none

        while True:
            low, at = none, -1
            for i in range(len(parts) - 1):
                if parts[i][1] < low:
                    low, at = parts[i][1], i
            if at < 0:
                break
            if at > 0:
                parts[at - 1] = (parts[at - 1][0], pair(at - 1))
            parts[at] = (parts[at][0], pair(at))
            del parts[at + 1]
        return len(parts) - 1
