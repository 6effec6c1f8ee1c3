"""The store on disk: layout, safe atomic writes, locking and git history."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from .. import lazy
from ..doc import frontmatter, paths, provenance
from ..doc.text import actor_name as checked_actor
from ..doc.text import content_hash, lone_surrogate
from ..errors import (
    Conflict,
    GitError,
    InvalidDocument,
    InvalidInput,
    NotFound,
    PreconditionFailed,
    TooLarge,
    UnsafePath,
)
from ..records import recordclass
from ..settings import (
    Settings,
    config_path,
)
from . import layout, undo
from .atomic import (
    atomic_write,
    discard_staged,
    fsync_dir,
    remove_dead_temp_files,
    rename_staged,
    run_all,
    stage_files,
    sync_folders,
)
from .gitlog import BOOK_SUFFIX, GitLog
from .journal import Journal, any_dead_owner, recover, tombstone
from .journal import folder as journal_folder
from .locks import FileLock

log = lazy.logger("memdir.store")

LOCK_STRIPES = 64


@recordclass(frozen=True)
class WriteResult:
    path: str
    hash: str
    size: int
    created: bool
    # history keys (derived-from, merged-from) the new content set, replacing the file's
    replaced: tuple[str, ...] = ()

    @property
    def etag(self) -> str:
        return f'"{self.hash[:32]}"'


class Store:
    """A memdir store rooted at ``root``. All writes go through here."""

    def __init__(self, root: Path, settings: Settings) -> None:
        self.root = root
        self.settings = settings
        timeout = settings.store.lock_timeout_seconds
        self._lock = FileLock(root / ".memdir" / "write.lock", timeout=timeout)
        self._stripes = [
            FileLock(root / ".memdir" / "locks" / f"{n:02d}.lock", timeout=timeout)
            for n in range(LOCK_STRIPES)
        ]
        self.git = GitLog(root, settings.store.git_batch_seconds, lock_timeout=timeout * 2)
        self._journal = Journal(root)
        self.put_back: list[str] = []  # files put back by recovery, for the index to sync
        self.crashed = False  # a writer died: opening the store syncs the whole index
        self._recover()

    def _recover(self) -> None:
        """Replay what crashed writers journaled but may not have on disk (memdir.files.journal)."""
        where = journal_folder(self.root)
        if not os.path.isdir(where):
            return
        if any_dead_owner(where, (".log", undo.SUFFIX, BOOK_SUFFIX)):
            # This process's own book, before it consumes the dead ones: if it dies before
            # the recovery (and the index sync after it) is done, the next open sees it.
            self._announce()

        def write(rel: str, data: bytes) -> None:
            norm, target = self.resolve(rel)
            with self.lock(norm):
                atomic_write(target, data, durable=True)

        named = recover(self.root, write)
        if named:
            self._queue_commit(named, "memdir", f"recover {len(named)} journaled writes")
        crashed = bool(named)
        if undo.pending(self.root):
            # Engine runs whose process died before they committed are put back (memdir.files.undo).
            crashed = True
            with self.lock():
                for _verb, restored, _kept in undo.recover(self.root, atomic_write):
                    self.put_back += restored
        if self.settings.store.git_commit and self.git.enabled:
            # Writes a dead process acknowledged but had not committed yet (memdir.files.gitlog).
            books, booked = self.git.recover_books()
            crashed = crashed or books > 0
            if booked:
                try:
                    self.git.flush()
                except (GitError, Conflict) as exc:
                    log.error("recovered writes stay queued for git: %s", exc)
            named += booked
        # The index learns the files recovery wrote, and those a dead writer may have
        # renamed into place before it indexed them (so doctor agrees right away).
        self.put_back += named
        if crashed:
            self.crashed = True
            remove_dead_temp_files(self.root)

    # -- creation ---------------------------------------------------------------

    @staticmethod
    def init(directory: Path, *, force: bool = False, git: bool = True) -> Path:
        """Create the store layout in ``directory`` (:func:`memdir.files.layout.create`)."""
        return layout.create(directory, force=force, git=git)

    def resolve(self, rel: str) -> tuple[str, Path]:
        return paths.confine(self.root, rel)

    def exists(self, rel: str) -> bool:
        return self.resolve(rel)[1].is_file()

    def read_bytes(self, rel: str) -> bytes:
        norm, target = self.resolve(rel)
        try:
            if not stat.S_ISREG(os.stat(target).st_mode) and not target.is_dir():
                # A pipe or a device would block the reader (a server thread) or never end.
                raise InvalidInput(f"{norm} is not a regular file")
            return target.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise NotFound(f"no such file in the store: {norm}") from None
        except IsADirectoryError:
            raise NotFound(f"{norm} is a folder, not a file") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(f"path goes through a symlink loop: {norm}") from None
            raise

    def read_text(self, rel: str) -> str:
        data = self.read_bytes(rel)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidDocument(f"{rel} is not valid UTF-8: {exc}") from None

    @staticmethod
    def _stripe_index(rel: str) -> int:
        import hashlib

        return int(hashlib.sha1(rel.encode()).hexdigest()[:8], 16) % LOCK_STRIPES

    @contextmanager
    def lock(self, rel: str | None = None) -> Iterator[None]:
        """Without ``rel``: the store-wide lock, held alone. With ``rel``: the lock of that
        path (writers of other paths go on in parallel; whole-store holders wait)."""
        if rel is None:
            with self._lock.hold():
                yield
            return
        stripe = self._stripes[self._stripe_index(rel)]
        with self._lock.hold(shared=True), stripe.hold():
            yield

    # -- writes ------------------------------------------------------------------

    def _check_content(self, norm: str, data: bytes | str) -> bytes:
        if isinstance(data, str):
            at = lone_surrogate(data)
            if at is not None:
                raise InvalidDocument(
                    f"{norm}: content is not valid Unicode text (a lone surrogate at "
                    f"character {at})"
                )
        raw = data.encode("utf-8") if isinstance(data, str) else data
        limit = self.settings.store.max_file_bytes
        if len(raw) > limit:
            raise TooLarge(f"{norm}: {len(raw)} bytes is over the limit of {limit} bytes")
        if isinstance(data, bytes):
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidDocument(f"{norm}: content is not valid UTF-8 ({exc})") from None
        if b"\x00" in raw and paths.is_markdown(norm):
            raise InvalidDocument(f"{norm}: content has a NUL byte (binary data is not memory)")
        return raw

    def _outside_nested_repository(self, norm: str) -> None:
        """Refuse a path inside another git repository (or store) under this one.

        Its git would not take the file (``git add`` skips an embedded repository without an
        error), so the write would never be committed here. One ``stat`` per folder.
        """
        folder = self.root
        for part in norm.split("/")[:-1]:
            folder = folder / part
            if (folder / ".git").exists() or (folder / ".memdir").is_dir():
                inner = folder.relative_to(self.root).as_posix()
                raise Conflict(
                    f"{norm} is inside {inner}/, another git repository or store; "
                    f"write there with --root {inner}"
                )

    def check_document(self, norm: str, text: str) -> bytes:
        """The bytes of a document the engine writes, checked as any write is: size, Unicode,
        no NUL byte, and frontmatter that parses. Raises InvalidDocument or TooLarge."""
        self._outside_nested_repository(norm)
        raw = self._check_content(norm, text)
        if paths.is_markdown(norm):
            parsed = frontmatter.parse(text)
            if parsed.has_block and parsed.error is not None:
                frontmatter.load_strict(text)  # raises InvalidDocument with line and column
        return raw

    def _prepare(
        self,
        rel: str,
        content: str | bytes,
        *,
        actor: str,
        provenance_value: tuple[str, str] | None,
        markdown_only: bool,
    ) -> tuple[str, Path, bytes]:
        """Validate one file's path and content; apply provenance. Writes nothing."""
        norm, target = self.resolve(rel)
        self._outside_nested_repository(norm)
        if target.is_dir():
            raise Conflict(f"{norm} is a folder, not a file: choose another name")
        if markdown_only and not paths.is_markdown(norm):
            raise InvalidDocument(f"{norm}: only markdown (.md) files can be written here")
        raw = self._check_content(norm, content)
        if paths.is_markdown(norm):
            text = raw.decode("utf-8")
            parsed = frontmatter.parse(text)
            if parsed.has_block and parsed.error is not None:
                frontmatter.load_strict(text)  # raises InvalidDocument with line and column
            if provenance_value is not None:
                entry = provenance.derived_entry(*provenance_value, actor)
                text = frontmatter.edit(
                    text, lambda fm: provenance.append_entry(fm, "derived-from", entry)
                )
                raw = self._check_content(norm, text)
        return norm, target, raw

    @property
    def durable(self) -> bool:
        return self.settings.store.durability == "full"

    def write_text(
        self,
        rel: str,
        content: str | bytes,
        *,
        actor: str | None = None,
        message: str | None = None,
        provenance_value: tuple[str, str] | None = None,
        if_match: str | None = None,
        markdown_only: bool = True,
    ) -> WriteResult:
        """Write a document atomically under its path lock.

        Markdown content must have valid YAML frontmatter when it has a block.
        A document that replaces another keeps the old one's ``derived-from`` and
        ``merged-from`` unless the new content sets them (the result names those it replaced);
        ``provenance_value`` then appends ``{type, id, date, actor}`` to ``derived-from``.
        ``if_match`` is an ETag (or content hash) that the current file must have.
        """
        actor_name = checked_actor(actor)
        norm, target, raw = self._prepare(
            rel,
            content,
            actor=actor_name,
            provenance_value=None,  # appended under the lock, after the history is carried
            markdown_only=markdown_only,
        )
        self._announce()
        with self.lock(norm):
            existed = target.is_file()
            if if_match is not None:
                self._check_etag(norm, target, if_match)
            raw, replaced = self._carry_history(norm, target, raw, provenance_value, actor_name)
            atomic_write(target, raw, durable=self.durable)
        result = WriteResult(norm, content_hash(raw), len(raw), not existed, replaced)
        self._queue_commit([norm], actor_name, message or f"write {norm}")
        return result

    def _carry_history(
        self,
        norm: str,
        target: Path,
        raw: bytes,
        provenance_value: tuple[str, str] | None,
        actor: str,
    ) -> tuple[bytes, tuple[str, ...]]:
        """``raw`` with the replaced file's history and this write's provenance (under the
        path's lock, so a concurrent writer's entry is read, never lost)."""
        if not paths.is_markdown(norm):
            return raw, ()
        old: str | None = None
        with suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
            old = target.read_bytes().decode("utf-8", errors="replace")
        entry = (
            None if provenance_value is None else provenance.derived_entry(*provenance_value, actor)
        )
        text, replaced = provenance.carry_history(old, raw.decode("utf-8"), entry)
        return self._check_content(norm, text), replaced

    def write_files(
        self,
        files: list[tuple[str, str | bytes]],
        *,
        actor: str | None = None,
        message: str | None = None,
        provenance_value: tuple[str, str] | None = None,
        after_rename: Callable[[list[WriteResult]], object] | None = None,
    ) -> list[WriteResult]:
        """Write several files together (e.g. a record and its sidecar): each atomic, the
        folders synced once, one commit. Every file is validated before any is written;
        ``provenance_value`` applies to the markdown files.

        The files are staged (and, with ``full`` durability, their data synced) before the
        path locks are taken; under the locks they are only renamed. ``after_rename`` (for
        example an index update) runs once every file is in place, while the folders are
        being synced; the call returns after both.

        With ``full`` durability, files that do not exist yet (a turn and its work log) are
        written without syncs and made durable by one synced append to this process's
        journal (:mod:`memdir.files.journal`), before the call returns.
        """
        actor_name = checked_actor(actor)
        prepared = [
            self._prepare(
                rel,
                content,
                actor=actor_name,
                provenance_value=provenance_value,
                markdown_only=False,
            )
            for rel, content in files
        ]
        self._announce()
        durable = self.durable
        journaled = durable and not any(os.path.lexists(t) for _n, t, _r in prepared)
        if journaled:
            durable = False  # the journal makes them durable; the files need no sync
        staged = stage_files([(t, r) for _n, t, r in prepared], durable=durable)
        try:
            with contextlib.ExitStack() as stack:
                for norm in sorted({norm for norm, _t, _r in prepared}, key=self._stripe_index):
                    stack.enter_context(self.lock(norm))
                existed = [target.is_file() for _n, target, _r in prepared]
                rename_staged(staged)
        except BaseException:
            discard_staged(staged)
            raise
        results = [
            WriteResult(norm, content_hash(raw), len(raw), created=not was)
            for (norm, _t, raw), was in zip(prepared, existed, strict=True)
        ]
        names = [r.path for r in results]
        calls: list[Callable[[], object]] = []
        if journaled:
            # After the renames, so no file is created while the journal's sync commits
            # (a create waits for that commit): the call returns once the record is synced.
            record = [(norm, raw) for norm, _t, raw in prepared]
            calls.append(functools.partial(self._journal.append, record))
        elif durable:
            calls.append(functools.partial(sync_folders, [t for _n, t, _r in prepared]))
        if after_rename is not None:
            calls.append(functools.partial(after_rename, results))
        try:
            run_all(calls)
        finally:
            # Last: the files are durable and indexed whatever git does with the commit
            # (which never raises: a failed one stays queued and is retried).
            self._queue_commit(names, actor_name, message or f"write {', '.join(names)}")
        return results

    def _check_etag(self, norm: str, target: Path, if_match: str) -> None:
        wanted = if_match.strip()
        if wanted == "*":
            if not target.is_file():
                raise PreconditionFailed(f"{norm} does not exist (If-Match: *)")
            return
        # HTTP allows a list ("a", "b"): the write goes ahead when any of them matches.
        tags = [t.strip().removeprefix("W/").strip('"') for t in wanted.split(",")]
        if not target.is_file():
            raise PreconditionFailed(f"{norm} does not exist (If-Match {if_match})")
        current = content_hash(target.read_bytes())[:32]
        if not any(len(tag) >= 8 and current.startswith(tag[:32]) for tag in tags):
            raise PreconditionFailed(
                f"{norm} changed since it was read (If-Match {if_match} does not match)"
            )

    def update_frontmatter(
        self,
        rel: str,
        mutate: Callable[[Any], None],
        *,
        actor: str | None = None,
        message: str | None = None,
    ) -> WriteResult:
        """Read-modify-write of a document's frontmatter under the lock; the body is kept."""
        norm, target = self.resolve(rel)
        self._outside_nested_repository(norm)
        actor_name = checked_actor(actor)
        with self.lock(norm):
            if not target.is_file():
                raise NotFound(f"no such file in the store: {norm}")
            text = self.read_text(norm)
            if text.startswith("\ufeff"):
                # Read as having no frontmatter (as KiwiFS reads it): a new block would be
                # put before the old one. The mark must go first.
                raise InvalidDocument(
                    f"{norm} starts with a byte order mark (U+FEFF); remove it so its "
                    "frontmatter can be read and changed"
                )
            new_text = frontmatter.edit(text, mutate)
            raw = self._check_content(norm, new_text)
            if new_text != text:
                self._announce()
                atomic_write(target, raw, durable=self.durable)
        result = WriteResult(norm, content_hash(raw), len(raw), created=False)
        if new_text != text:
            self._queue_commit([norm], actor_name, message or f"update {norm}")
        return result

    def delete(self, rel: str, *, actor: str | None = None, message: str | None = None) -> str:
        norm, target = self.resolve(rel)
        self._outside_nested_repository(norm)
        with self.lock(norm):
            if not target.is_file():
                raise NotFound(f"no such file in the store: {norm}")
            target.unlink()
            fsync_dir(target.parent)
            # Replay must not bring it back, and this process's journal must not keep its
            # bytes (a purge is final): the journaled files are synced, the journal emptied.
            tombstone(self.root, [norm])
            self._journal.checkpoint()
        self._queue_commit([norm], checked_actor(actor), message or f"delete {norm}")
        return norm

    def _announce(self) -> None:
        """Before a write: leave the sign (a locked book) that tells the next open of the
        store whether this process died in the middle of one (memdir.files.gitlog)."""
        if self.settings.store.git_commit:
            self.git.open_book()

    def _queue_commit(self, rels: list[str], actor: str, message: str) -> None:
        """Queue a commit of a write that is done; never raises: a commit git cannot make
        now stays queued (and in the journal) and is retried (memdir.files.gitlog)."""
        if self.settings.store.git_commit:
            self.git.queue_quietly(rels, actor, message)

    def commit_pending(self) -> None:
        self.git.flush()

    def close(self) -> None:
        """Sync and remove the journal, commit what is queued, release the lock files."""
        self._journal.close()
        try:
            self.git.close()
        except (GitError, Conflict) as exc:
            # The writes are done; their book keeps the commit for the next open.
            log.error("git commit failed at close; the next open commits it: %s", exc)
        for lock in (self._lock, *self._stripes):
            lock.close()

    @property
    def config_file(self) -> Path:
        return config_path(self.root)
