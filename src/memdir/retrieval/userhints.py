"""Users named in a query: who a question is about, and the query without their names.

A question such as "What did Melanie paint recently?" names a user of the store
(the ``user`` of turn records). Hybrid search lifts that user's turns and embeds
the query without the name: a name in a short query dominates its embedding and
pulls in every turn by or about that person, whatever it says, while the user
hint matches the name exactly. Pure logic, no storage.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_MIN_LENGTH = 2


def _pattern(name: str) -> re.Pattern[str]:
    # A whole word, optionally possessive ("Melanie's", "Melanie’s").
    return re.compile(rf"(?<![\w-]){re.escape(name)}(?:['’]s)?(?![\w-])", re.IGNORECASE)


def named_users(query: str, users: Iterable[str]) -> list[str]:
    """The users whose name appears in the query as a whole word (case-insensitive)."""
    found = []
    for user in users:
        name = user.strip()
        if len(name) >= _MIN_LENGTH and name not in found and _pattern(name).search(query):
            found.append(name)
    return found


def without_users(query: str, names: Iterable[str]) -> str:
    """The query with these names removed; the query itself when nothing else would be left."""
    text = query
    for name in names:
        text = _pattern(name).sub(" ", text)
    text = " ".join(text.split())
    return text if re.search(r"\w", text) else query
