"""Sign-in sessions of the web UI: a random id in a cookie, the token's hash on the server.

The cookie holds only a random session id. The server keeps, per session, the SHA-256 of
the token that signed in (the form the config already stores), never the token itself,
and looks the token up again on every request: a token revoked while a session is open
is refused at once, and a session never outlives its token. Sessions live in the
server's memory; a restart signs everyone out.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time

COOKIE = "memdir_session"
MAX_AGE_SECONDS = 12 * 3600
MAX_SESSIONS = 10_000


def _key(session_id: str) -> str:
    # The table is keyed by a hash of the id, so a dump of it opens no session.
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()


class Sessions:
    """Open sessions: ``create`` one for a token's hash, ``digest`` reads it back."""

    def __init__(self, max_age_seconds: float = MAX_AGE_SECONDS) -> None:
        self.max_age_seconds = max_age_seconds
        self._open: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def create(self, token_digest: str) -> str:
        """A new session id for the token whose stored hash is ``token_digest``."""
        session_id = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            if len(self._open) >= MAX_SESSIONS:
                self._expire(now)
            if len(self._open) >= MAX_SESSIONS:  # still full: the oldest goes
                oldest = min(self._open, key=lambda k: self._open[k][1])
                del self._open[oldest]
            self._open[_key(session_id)] = (token_digest, now + self.max_age_seconds)
        return session_id

    def digest(self, session_id: str | None) -> str | None:
        """The token hash of an open session, or None (unknown, ended or expired)."""
        if not session_id or len(session_id) > 200:
            return None
        key = _key(session_id)
        with self._lock:
            found = self._open.get(key)
            if found is None:
                return None
            if found[1] < time.monotonic():
                del self._open[key]
                return None
            return found[0]

    def end(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._open.pop(_key(session_id), None)

    def _expire(self, now: float) -> None:
        for key in [k for k, (_, until) in self._open.items() if until < now]:
            del self._open[key]


def cookie_value(header: str | None) -> str | None:
    """The session id in a ``Cookie`` header, if any."""
    if not header:
        return None
    for part in header.split(";"):
        name, sep, value = part.strip().partition("=")
        if sep and name == COOKIE:
            return value.strip().strip('"') or None
    return None
