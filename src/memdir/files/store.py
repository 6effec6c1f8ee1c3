"""The store on disk: layout, safe atomic writes, locking and git history."""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..doc import frontmatter, paths, provenance
from ..doc.text import actor_name as checked_actor
from ..doc.text import lone_surrogate
from ..errors import (
    Conflict,
    GitError,
    InvalidDocument,
    InvalidInput,
    NotFound,
    PreconditionFailed,
    StoreExists,
    StoreNotFound,
    TooLarge,
    UnsafePath,
)
from ..settings import (
    Settings,
    config_path,
    default_config_toml,
    harness_digest,
    pin_harness,
    pinned_harness,
)
from . import undo
from .gitlog import BOOK_SUFFIX, GitLog, run_git
from .journal import Journal, any_dead_owner, recover, tombstone
from .journal import folder as journal_folder
from .locks import FileLock

log = logging.getLogger("memdir.store")

ROOT_ENV = "MEMDIR_ROOT"
LOCK_STRIPES = 64
TEMP_NAME_BYTES = 40  # of the target's name kept in its temp file's name
TEMP_SUFFIX = ".tmp"
_TEMP_OWNER = re.compile(r"^\..*\.(\d+)-[^.]+\.tmp$")
STORE_FOLDERS = (
    "inbox",
    "quarantine",
    "episodes/turns",
    "episodes/operational",
    "episodes/life",
    "episodes/signal",
    "wiki",
    "evals",
)
GITIGNORE = """\
# derived files: rebuildable with `memdir reindex`
.memdir/index.db
.memdir/index.db-*
.memdir/index.db.damaged-*
.memdir/vectors/
.memdir/*.lock
.memdir/locks/
.memdir/cache/
.memdir/watch/
# a writer's journal of files not yet synced (replayed after a crash)
.memdir/journal/
"""


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
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


def is_store(path: Path) -> bool:
    return (path / ".memdir" / "config.toml").is_file()


def find_root(start: Path | None = None, explicit: str | Path | None = None) -> Path:
    """Find the store: ``explicit`` (``--root``), then ``MEMDIR_ROOT``, then walk up like git."""
    chosen = explicit if explicit is not None else os.environ.get(ROOT_ENV) or None
    if chosen is not None:
        root = Path(chosen).expanduser()
        if not root.is_dir():
            raise StoreNotFound(f"store root does not exist: {chosen}")
        root = root.resolve()
        if not is_store(root):
            raise StoreNotFound(f"not a memdir store (no .memdir/config.toml): {root}")
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if is_store(candidate):
            return candidate
    raise StoreNotFound(
        f"no memdir store in {here} or any parent; run `memdir init` or pass --root DIR"
    )


def _template(name: str) -> str:
    return resources.files("memdir").joinpath("templates", name).read_text(encoding="utf-8")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_folder(folder: Path) -> None:
    """``mkdir -p``, with a clear error when a file stands where a folder must go."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise Conflict(f"{folder.name} (in {folder.parent}) is a file, not a folder") from None


def _stage(target: Path, data: bytes) -> tuple[str, int]:
    """Write ``data`` to a new temp file beside ``target``; return its name and open fd."""
    _make_folder(target.parent)
    # The temp file's name must fit where the target's does: a name of 255 bytes is allowed.
    short = os.fsencode(target.name)[:TEMP_NAME_BYTES].decode("utf-8", errors="ignore")
    # The writer's pid in the name tells a dead writer's leftover from a live one's file.
    fd, tmp = tempfile.mkstemp(
        prefix=f".{short}.{os.getpid()}-", suffix=TEMP_SUFFIX, dir=target.parent
    )
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, 0o644)
    except BaseException:
        os.close(fd)
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp, fd


_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_mutex = threading.Lock()


def _sync_pool() -> ThreadPoolExecutor:
    """Threads that run fsync calls beside the caller (made again after a fork)."""
    global _pool
    with _pool_mutex:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(4, thread_name_prefix="memdir-sync"))
        return _pool[1]


def _run_all(calls: list[Callable[[], object]]) -> None:
    """Run the calls at once (the last in this thread); raise the first failure."""
    if len(calls) <= 1:
        for call in calls:
            call()
        return
    futures = [_sync_pool().submit(call) for call in calls[:-1]]
    try:
        calls[-1]()
    finally:
        errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error


def stage_files(items: list[tuple[Path, bytes]], *, durable: bool = True) -> list[tuple[str, Path]]:
    """Write each item to a temp file beside its target; with ``durable``, sync their data,
    all at once (the kernel can share one journal commit among them). Renames nothing."""
    staged: list[tuple[str, Path]] = []
    fds: list[int] = []
    try:
        for target, data in items:
            tmp, fd = _stage(target, data)
            staged.append((tmp, target))
            fds.append(fd)
        if durable:
            _run_all([functools.partial(os.fdatasync, fd) for fd in fds])
    except BaseException:
        discard_staged(staged)
        raise
    finally:
        for fd in fds:
            with suppress(OSError):
                os.close(fd)
    return staged


def discard_staged(staged: list[tuple[str, Path]]) -> None:
    for tmp, _target in staged:
        with suppress(OSError):
            os.unlink(tmp)


def rename_staged(staged: list[tuple[str, Path]]) -> None:
    """Move staged temp files over their targets (each rename is atomic)."""
    try:
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        discard_staged(staged)
        raise


def sync_folders(targets: Iterable[Path]) -> None:
    """Sync the folder of each target once (so renames into it are durable), all at once."""
    folders = list(dict.fromkeys(target.parent for target in targets))
    _run_all([functools.partial(_fsync_dir, folder) for folder in folders])


def atomic_write(target: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``target`` so a crash leaves the old or the new file, never half.

    With ``durable`` the data and the folder entry are synced to disk before returning.
    """
    atomic_write_many([(target, data)], durable=durable)


def atomic_write_many(items: list[tuple[Path, bytes]], *, durable: bool = True) -> None:
    """Write several files atomically: stage them and sync their data together, rename
    each, then sync each folder once."""
    staged = stage_files(items, durable=durable)
    rename_staged(staged)
    if durable:
        sync_folders(target for _tmp, target in staged)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_dead_temp_files(root: Path) -> list[str]:
    """Remove the temp files (``.<name>.<pid>-<random>.tmp``) of writers that are gone.

    A writer killed between staging and renaming leaves one; a live writer's (its pid
    runs) is kept. Walks the store outside ``.git`` and ``.memdir``; run after a crash.
    """
    removed: list[str] = []
    for folder, dirs, names in os.walk(root):
        if folder == os.fspath(root):
            dirs[:] = [d for d in dirs if d not in (".git", ".memdir")]
        for name in names:
            found = _TEMP_OWNER.match(name)
            if found is None or _alive(int(found.group(1))):
                continue
            path = os.path.join(folder, name)
            with suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(os.path.relpath(path, root))
    if removed:
        log.warning("removed %d temp file(s) of writers that are gone", len(removed))
    return removed


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
        """Create the store layout in ``directory``; refuse an existing store unless ``force``,
        and a folder inside another store (Conflict naming the outer store).

        Never overwrites an existing file, even with ``force``: it only adds what is missing.
        """
        directory = directory.expanduser()
        if directory.exists() and not directory.is_dir():
            raise StoreExists(f"{directory} exists and is not a folder")
        # The outer store's git would skip the inner folder, so every write of the outer
        # store under it would be refused from then on.
        here = directory.resolve()
        outer = next((p for p in here.parents if is_store(p)), None)
        if outer is not None:
            raise Conflict(
                f"{here} is inside the memdir store {outer}; a store nested in another makes "
                "the outer one refuse every write under it: choose a folder outside it"
            )
        if is_store(directory) and not force:
            raise StoreExists(
                f"{directory} is already a memdir store; use --force to add missing parts"
            )
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidInput(f"cannot create the store at {directory}: {exc.strerror}") from None
        root = directory.resolve()
        files = {
            ".memdir/config.toml": default_config_toml(),
            ".gitignore": GITIGNORE,
            "HARNESS.md": _template("HARNESS.md"),
            "PROGRAM.md": _template("PROGRAM.md"),
            "index.md": _template("index.md"),
            "evals/questions.yaml": _template("questions.yaml"),
        }
        created = []
        for folder in STORE_FOLDERS:
            (root / folder).mkdir(parents=True, exist_ok=True)
            keep = root / folder / ".gitkeep"
            if not any((root / folder).iterdir()):
                keep.touch()
                created.append(f"{folder}/.gitkeep")
        for rel, text in files.items():
            target = root / rel
            if target.exists():
                continue
            atomic_write(target, text.encode("utf-8"))
            created.append(rel)
        if pinned_harness(root) is None:
            text = (root / "HARNESS.md").read_text(encoding="utf-8")
            pin_harness(root, harness_digest(text))
            created.append(".memdir/config.toml")
        if git and shutil.which("git"):
            if not (root / ".git").exists():
                run_git(root, "init", "-q", "-b", "main")
                run_git(root, "add", "-A")
                run_git(root, "commit", "-q", "--no-verify", "-m", "memdir init", check=False)
            elif created:
                # An existing repository (--force, or a folder already under git): commit only
                # what init made, never the owner's uncommitted edits.
                # A path the owner's .gitignore leaves out is not added (git would refuse all).
                made = sorted(set(created))
                ignored = run_git(root, "check-ignore", "-z", "--", *made, check=False)
                made = [rel for rel in made if rel not in ignored.split("\0")]
                staged = []
                if made:
                    run_git(root, "add", "--", *made, check=False)
                    listed = run_git(root, "diff", "--cached", "--name-only", "-z", "--", *made)
                    staged = [rel for rel in listed.split("\0") if rel]
                if staged:
                    run_git(
                        root, "commit", "-q", "--no-verify", "-m", "memdir init", "--", *staged,
                        check=False,
                    )  # fmt: skip
        return root

    # -- paths and reads ---------------------------------------------------------

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
            _run_all(calls)
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
            _fsync_dir(target.parent)
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
