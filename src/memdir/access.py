"""Bearer tokens: scopes, path-prefix confinement, and their entries in the config.

Pure logic shared by the HTTP API and the MCP server. A token is stored only as
its SHA-256 hash in ``.memdir/config.toml`` (``[[server.tokens]]`` entries with
``name``, ``hash``, ``scope``, optional ``prefix``, ``created``). A request's
token becomes a :class:`Principal`, which every route and tool asks for a scope
(``read`` < ``write`` < ``admin``) and, for paths, for the token's prefix.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import re
import secrets
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import tomli_w

from .errors import ConfigError, Forbidden, InvalidInput, Unauthorized
from .records import recordclass

SCOPES: tuple[str, ...] = ("read", "write", "admin")
TOKEN_PREFIX = "mdt_"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HEADER = re.compile(r"^\[\[\s*server\.tokens\s*\]\]\s*(#.*)?$")
_ANY_HEADER = re.compile(r"^\s*\[")


def hash_token(token: str) -> str:
    """The stored form of a token (tokens are random, so one SHA-256 is enough)."""
    return "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()


def normalize_prefix(prefix: str | None) -> str:
    """``episodes`` -> ``episodes/``; empty means the whole store."""
    if prefix is None:
        return ""
    if any(ord(c) < 32 or c == "\x7f" or 0xD800 <= ord(c) <= 0xDFFF for c in prefix):
        raise InvalidInput(
            f"a token prefix cannot contain control characters or lone surrogates: {prefix!r}"
        )
    value = prefix.strip().replace("\\", "/")
    while value.startswith("./"):
        value = value[2:]
    value = value.lstrip("/")
    if not value:
        return ""
    parts = [p for p in value.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise InvalidInput(f"a token prefix cannot contain '..': {prefix}")
    return "/".join(parts) + "/"


@recordclass(frozen=True)
class TokenEntry:
    """One configured token (its hash, never the token itself)."""

    name: str
    hash: str
    scope: str
    prefix: str = ""
    created: str = ""

    def to_dict(self) -> dict[str, str]:
        out = {"name": self.name, "hash": self.hash, "scope": self.scope}
        if self.prefix:
            out["prefix"] = self.prefix
        if self.created:
            out["created"] = self.created
        return out

    def public(self) -> dict[str, str]:
        """What ``token list`` shows: no hash, only its first characters as an id."""
        return {
            "name": self.name,
            "id": self.hash.removeprefix("sha256:")[:8],
            "scope": self.scope,
            "prefix": self.prefix,
            "created": self.created,
        }


def parse_entries(raw: Iterable[Mapping[str, Any]]) -> list[TokenEntry]:
    """Validate the ``[[server.tokens]]`` entries of a config."""
    entries: list[TokenEntry] = []
    for number, item in enumerate(raw, start=1):
        if not isinstance(item, Mapping):
            raise ConfigError(f"server.tokens entry {number} must be a table")
        name, digest, scope = item.get("name"), item.get("hash"), item.get("scope", "read")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigError(f"server.tokens entry {number}: bad or missing name")
        if not isinstance(digest, str) or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise ConfigError(f"server.tokens {name}: hash must be sha256:<64 hex digits>")
        if scope not in SCOPES:
            raise ConfigError(f"server.tokens {name}: scope must be one of {', '.join(SCOPES)}")
        prefix = item.get("prefix", "")
        if not isinstance(prefix, str):
            raise ConfigError(f"server.tokens {name}: prefix must be a string")
        created = item.get("created", "")
        try:
            norm = normalize_prefix(prefix)
        except InvalidInput as exc:
            raise ConfigError(f"server.tokens {name}: {exc.message}") from None
        entries.append(TokenEntry(name, digest, scope, norm, str(created or "")))
    return entries


@recordclass(frozen=True)
class Principal:
    """Who is calling: a token's name, scope and prefix (``""`` = the whole store)."""

    name: str
    scope: str
    prefix: str = ""
    authenticated: bool = True

    def allows(self, scope: str) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(scope)

    def require(self, scope: str, what: str = "this request") -> None:
        if not self.allows(scope):
            raise Forbidden(
                f"{what} needs {'an' if scope[:1] in 'aeiou' else 'a'} {scope} token; "
                f"token {self.name!r} has scope {self.scope}"
            )

    def require_unconfined(self, what: str) -> None:
        """Verbs that see the whole store refuse a prefix-confined token."""
        if self.prefix:
            raise Forbidden(
                f"{what} covers the whole store; token {self.name!r} is confined to {self.prefix}"
            )

    def covers(self, path: str) -> bool:
        return not self.prefix or path.startswith(self.prefix)

    def check_path(self, path: str) -> None:
        """``path`` is normalised (store-relative, ``a/b.md``)."""
        if not self.covers(path):
            raise Forbidden(f"token {self.name!r} is confined to {self.prefix}; {path} is outside")

    def confine(self, prefix: str | None) -> str | None:
        """The path prefix a listing or search may use: the caller's, inside the token's."""
        asked = (prefix or "").lstrip("/")
        if not self.prefix:
            return asked or None
        if not asked:
            return self.prefix
        if asked.startswith(self.prefix):
            return asked
        if self.prefix.startswith(asked):  # a wider prefix narrows to the token's
            return self.prefix
        raise Forbidden(f"token {self.name!r} is confined to {self.prefix}; {asked} is outside")


LOCAL = Principal("local", "admin", "", authenticated=False)
"""The caller when auth is off (loopback with no tokens) or over stdio."""


def entries_in_config(text: str) -> list[TokenEntry]:
    """The token entries of a config.toml's text."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config.toml: {exc}") from None
    server = raw.get("server", {})
    tokens = server.get("tokens", []) if isinstance(server, Mapping) else []
    if not isinstance(tokens, list):
        raise ConfigError("server.tokens must be an array of tables")
    return parse_entries(tokens)


class TokenRegistry:
    """Checks bearer tokens against the hashed entries.

    With ``config`` set, the entries are re-read when that file changes, so a
    token created or revoked while a server runs takes effect at once.
    """

    def __init__(
        self,
        entries: Sequence[TokenEntry],
        *,
        required: bool = False,
        config: Path | None = None,
    ) -> None:
        self._required = required
        self._config = config
        self._stamp: tuple[int, int] | None = self._stat() if config is not None else None
        self._set(entries)

    @classmethod
    def from_settings(
        cls, raw: Iterable[Mapping[str, Any]], *, required: bool = False, config: Path | None = None
    ) -> TokenRegistry:
        return cls(parse_entries(raw), required=required, config=config)

    def _set(self, entries: Sequence[TokenEntry]) -> None:
        self._by_hash = {e.hash: e for e in entries}
        self.required = self._required or bool(entries)

    def _stat(self) -> tuple[int, int] | None:
        assert self._config is not None
        try:
            st = self._config.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def refresh(self) -> None:
        """Re-read the tokens when the config file changed (a failed read keeps the old set)."""
        if self._config is None:
            return
        stamp = self._stat()
        if stamp == self._stamp:
            return
        try:
            text = self._config.read_text(encoding="utf-8") if stamp else ""
            self._set(entries_in_config(text))
        except (OSError, UnicodeDecodeError, ConfigError):
            return
        self._stamp = stamp

    def authenticate(self, authorization: str | None, *, required: bool = False) -> Principal:
        """The principal for an ``Authorization`` header value; 401 when it is not valid.

        ``required`` demands a token even when the registry would not (a client that
        is not on this machine).
        """
        self.refresh()
        if not (self.required or required):
            if authorization:
                return self._check(authorization)
            return LOCAL
        if not authorization:
            raise Unauthorized("missing bearer token: send Authorization: Bearer <token>")
        return self._check(authorization)

    def by_digest(self, digest: str) -> Principal | None:
        """The principal of the token whose stored hash is ``digest`` (a web UI session
        keeps only that), or None once it is revoked."""
        self.refresh()
        for stored, entry in self._by_hash.items():
            if hmac.compare_digest(stored, digest):
                return Principal(entry.name, entry.scope, entry.prefix)
        return None

    def _check(self, authorization: str) -> Principal:
        kind, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if kind.lower() != "bearer" or not token:
            raise Unauthorized("malformed Authorization header: expected Bearer <token>")
        digest = hash_token(token)
        for stored, entry in self._by_hash.items():
            if hmac.compare_digest(stored, digest):
                return Principal(entry.name, entry.scope, entry.prefix)
        raise Unauthorized("unknown or revoked token")


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise InvalidInput(
            f"bad token name {name!r}: letters, digits, '.', '_' or '-', at most 64 characters"
        )
    return name


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise InvalidInput(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return scope


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach."""
    value = host.strip().strip("[]")
    if value == "localhost":
        return True
    try:
        return ipaddress.ip_address(value).is_loopback
    except ValueError:
        return False


# -- config text -----------------------------------------------------------------------


def render_entries(entries: Sequence[TokenEntry]) -> str:
    """The ``[[server.tokens]]`` tables; a TOML library quotes the values (a hand-made
    escape let ``\\x7f`` through, which no TOML reader accepts)."""
    return "\n".join("[[server.tokens]]\n" + tomli_w.dumps(e.to_dict()) for e in entries)


def config_with_tokens(text: str, entries: Sequence[TokenEntry]) -> str:
    """``text`` (a config.toml) with its ``[[server.tokens]]`` tables replaced by ``entries``.

    Everything else in the file is kept byte for byte. A ``tokens = [...]`` key
    written inline under ``[server]`` is not supported and is refused.
    """
    kept: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if _HEADER.match(stripped):
            skipping = True
            continue
        if skipping and _ANY_HEADER.match(line):
            skipping = False
        if skipping:
            continue
        kept.append(line)
    section = None
    for line in kept:
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
        elif section == "[server]" and re.match(r"^tokens\s*=", stripped):
            raise ConfigError(
                "config.toml sets server.tokens inline; write them as [[server.tokens]] tables"
            )
    body = "".join(kept).rstrip("\n")
    rendered = render_entries(entries)
    if not rendered:
        return body + "\n"
    return body + "\n\n" + rendered


class _Resolver(Protocol):
    root: Path

    def resolve(self, rel: str) -> tuple[str, Path]: ...


def authorize_path(principal: Principal, store: _Resolver, path: str) -> str:
    """Normalise ``path`` in ``store`` and check it (and where a symlink leads) is covered."""
    norm, target = store.resolve(path)
    principal.check_path(norm)
    if principal.prefix and os.path.lexists(target):
        real = os.path.relpath(os.path.realpath(target), os.path.realpath(store.root))
        principal.check_path(real.replace(os.sep, "/"))
    return norm


def authorize_parents(principal: Principal, store: _Resolver, parents: Iterable[str]) -> None:
    """Check the document paths among a turn's ``parents`` as :func:`authorize_path` does:
    a confined token names no document outside its prefix (not even to learn it exists)."""
    from .doc.turnrecord import is_turn_id

    for parent in parents:
        if isinstance(parent, str) and not is_turn_id(parent.strip()):
            authorize_path(principal, store, parent.strip())
