"""One error hierarchy for memdir.

Every error that crosses the service API is a :class:`MemdirError` with a stable
``code``. Adapters translate them in exactly one place each: the CLI prints a
single line to stderr and exits non-zero, HTTP answers ``{"error": {"code",
"message"}}`` with :attr:`MemdirError.http_status`, MCP returns a tool error.
"""

from __future__ import annotations


class MemdirError(Exception):
    """Base class. ``code`` is stable and machine-readable."""

    code = "memdir_error"
    http_status = 500
    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidInput(MemdirError):
    """A flag, argument or request body is malformed."""

    code = "invalid_input"
    http_status = 400
    exit_code = 2


class InvalidProvenance(InvalidInput):
    code = "invalid_provenance"


class InvalidDocument(InvalidInput):
    """Content that cannot be stored: bad YAML frontmatter, bad UTF-8, wrong kind."""

    code = "invalid_document"


class InvalidQuery(InvalidInput):
    code = "invalid_query"


class UnsafePath(MemdirError):
    """A path that would leave the store or touch its private folders."""

    code = "unsafe_path"
    http_status = 400
    exit_code = 2


class TooLarge(MemdirError):
    code = "too_large"
    http_status = 413
    exit_code = 2


class NotFound(MemdirError):
    code = "not_found"
    http_status = 404


class StoreNotFound(NotFound):
    code = "store_not_found"


class Conflict(MemdirError):
    code = "conflict"
    http_status = 409


class StoreExists(Conflict):
    code = "store_exists"


class PreconditionFailed(Conflict):
    """An optimistic-concurrency check (If-Match) failed."""

    code = "precondition_failed"
    http_status = 412


class HarnessChanged(Conflict):
    """HARNESS.md differs from the pinned hash; writing verbs refuse."""

    code = "harness_changed"


class IndexBusy(MemdirError):
    """Another process held the index's write lock longer than a writer waits for it."""

    code = "index_busy"
    http_status = 503


class IndexUnavailable(MemdirError):
    """The Postgres index cannot be reached (the files are written; searches wait for it)."""

    code = "index_unavailable"
    http_status = 503


class ConfigError(MemdirError):
    code = "config_error"
    http_status = 500
    exit_code = 2


class ProgramError(ConfigError):
    """PROGRAM.md does not parse."""

    code = "program_error"


class ProviderError(MemdirError):
    """A plugin provider (model endpoint, embedder) failed or is missing."""

    code = "provider_error"
    http_status = 502


class MissingExtra(ProviderError):
    code = "missing_extra"
    http_status = 501


class ModelMismatch(ProviderError):
    """The store's vectors were made by another model than the configured one."""

    code = "model_mismatch"
    http_status = 409


class Unauthorized(MemdirError):
    code = "unauthorized"
    http_status = 401


class Forbidden(MemdirError):
    code = "forbidden"
    http_status = 403


class UnsupportedMediaType(InvalidInput):
    """A request body that is not JSON (what a cross-site form or ``text/plain`` POST sends)."""

    code = "unsupported_media_type"
    http_status = 415


class GitError(MemdirError):
    code = "git_error"


class SyncError(MemdirError):
    """A step of ``memdir sync`` the remote or git refused (unreachable, a push refused, a
    merge in the way). Nothing is lost: local commits stay and the next sync retries."""

    code = "sync_failed"
    http_status = 502
