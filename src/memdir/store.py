"""The store on disk: layout, safe atomic writes, locking and git history."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from . import frontmatter, paths, provenance
from .errors import (
    InvalidDocument,
    NotFound,
    PreconditionFailed,
    StoreExists,
    StoreNotFound,
    TooLarge,
)
from .gitlog import GitLog, run_git
from .locks import FileLock
from .settings import Settings, config_path, default_config_toml

ROOT_ENV = "MEMDIR_ROOT"
LOCK_STRIPES = 64
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
.memdir/vectors/
.memdir/*.lock
.memdir/locks/
.memdir/cache/
"""


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class WriteResult:
    path: str
    hash: str
    size: int
    created: bool

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


def _stage(target: Path, data: bytes, durable: bool) -> str:
    """Write ``data`` to a temp file beside ``target`` (synced when ``durable``)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fdatasync(handle.fileno())
        os.chmod(tmp, 0o644)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def atomic_write(target: Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``target`` so a crash leaves the old or the new file, never half.

    With ``durable`` the data and the folder entry are synced to disk before returning.
    """
    atomic_write_many([(target, data)], durable=durable)


def atomic_write_many(items: list[tuple[Path, bytes]], *, durable: bool = True) -> None:
    """Write several files atomically: stage and sync each, rename each, sync each folder once."""
    staged: list[tuple[str, Path]] = []
    try:
        for target, data in items:
            staged.append((_stage(target, data, durable), target))
        for tmp, target in staged:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _target in staged:
            with suppress(OSError):
                os.unlink(tmp)
        raise
    if durable:
        for folder in dict.fromkeys(target.parent for _tmp, target in staged):
            _fsync_dir(folder)


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

    # -- creation ---------------------------------------------------------------

    @staticmethod
    def init(directory: Path, *, force: bool = False, git: bool = True) -> Path:
        """Create the store layout in ``directory``; refuse an existing store unless ``force``.

        Never overwrites an existing file, even with ``force``: it only adds what is missing.
        """
        directory = directory.expanduser()
        if directory.exists() and not directory.is_dir():
            raise StoreExists(f"{directory} exists and is not a folder")
        if is_store(directory) and not force:
            raise StoreExists(
                f"{directory} is already a memdir store; use --force to add missing parts"
            )
        directory.mkdir(parents=True, exist_ok=True)
        root = directory.resolve()
        files = {
            ".memdir/config.toml": default_config_toml(),
            ".gitignore": GITIGNORE,
            "HARNESS.md": _template("HARNESS.md"),
            "PROGRAM.md": _template("PROGRAM.md"),
            "index.md": _template("index.md"),
            "evals/questions.yaml": _template("questions.yaml"),
        }
        for folder in STORE_FOLDERS:
            (root / folder).mkdir(parents=True, exist_ok=True)
            keep = root / folder / ".gitkeep"
            if not any((root / folder).iterdir()):
                keep.touch()
        created = []
        for rel, text in files.items():
            target = root / rel
            if target.exists():
                continue
            atomic_write(target, text.encode("utf-8"))
            created.append(rel)
        from . import harness

        if harness.pinned(root) is None:
            harness.pin(root, harness.load(root).sha256)
        if git and shutil.which("git"):
            if not (root / ".git").exists():
                run_git(root, "init", "-q", "-b", "main")
            run_git(root, "add", "-A")
            run_git(root, "commit", "-q", "--no-verify", "-m", "memdir init", check=False)
        return root

    # -- paths and reads ---------------------------------------------------------

    def resolve(self, rel: str) -> tuple[str, Path]:
        return paths.confine(self.root, rel)

    def exists(self, rel: str) -> bool:
        return self.resolve(rel)[1].is_file()

    def read_bytes(self, rel: str) -> bytes:
        norm, target = self.resolve(rel)
        try:
            return target.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"no such file in the store: {norm}") from None
        except IsADirectoryError:
            raise NotFound(f"{norm} is a folder, not a file") from None

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
        raw = data.encode("utf-8") if isinstance(data, str) else data
        limit = self.settings.store.max_file_bytes
        if len(raw) > limit:
            raise TooLarge(f"{norm}: {len(raw)} bytes is over the limit of {limit} bytes")
        if isinstance(data, bytes):
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidDocument(f"{norm}: content is not valid UTF-8 ({exc})") from None
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
                text = frontmatter.edit(text, lambda fm: _append_list(fm, "derived-from", entry))
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
        ``provenance_value`` appends ``{type, id, date, actor}`` to ``derived-from``.
        ``if_match`` is an ETag (or content hash) that the current file must have.
        """
        actor_name = (actor or "").strip() or "anonymous"
        norm, target, raw = self._prepare(
            rel,
            content,
            actor=actor_name,
            provenance_value=provenance_value,
            markdown_only=markdown_only,
        )
        with self.lock(norm):
            existed = target.is_file()
            if if_match is not None:
                self._check_etag(norm, target, if_match)
            atomic_write(target, raw, durable=self.durable)
        result = WriteResult(norm, content_hash(raw), len(raw), created=not existed)
        self._queue_commit([norm], actor_name, message or f"write {norm}")
        return result

    def write_files(
        self,
        files: list[tuple[str, str | bytes]],
        *,
        actor: str | None = None,
        message: str | None = None,
        provenance_value: tuple[str, str] | None = None,
    ) -> list[WriteResult]:
        """Write several files together (e.g. a record and its sidecar): each atomic, the
        folders synced once, one commit. Every file is validated before any is written;
        ``provenance_value`` applies to the markdown files."""
        actor_name = (actor or "").strip() or "anonymous"
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
        with contextlib.ExitStack() as stack:
            for norm in sorted({norm for norm, _t, _r in prepared}, key=self._stripe_index):
                stack.enter_context(self.lock(norm))
            existed = [target.is_file() for _n, target, _r in prepared]
            atomic_write_many([(t, r) for _n, t, r in prepared], durable=self.durable)
        results = [
            WriteResult(norm, content_hash(raw), len(raw), created=not was)
            for (norm, _t, raw), was in zip(prepared, existed, strict=True)
        ]
        names = [r.path for r in results]
        self._queue_commit(names, actor_name, message or f"write {', '.join(names)}")
        return results

    def _check_etag(self, norm: str, target: Path, if_match: str) -> None:
        wanted = if_match.strip()
        if wanted == "*":
            if not target.is_file():
                raise PreconditionFailed(f"{norm} does not exist (If-Match: *)")
            return
        wanted = wanted.removeprefix("W/").strip('"')
        current = content_hash(target.read_bytes())[:32] if target.is_file() else ""
        if not current or not current.startswith(wanted[:32]) or len(wanted) < 8:
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
        actor_name = (actor or "").strip() or "anonymous"
        with self.lock(norm):
            if not target.is_file():
                raise NotFound(f"no such file in the store: {norm}")
            text = self.read_text(norm)
            new_text = frontmatter.edit(text, mutate)
            raw = self._check_content(norm, new_text)
            if new_text != text:
                atomic_write(target, raw, durable=self.durable)
        result = WriteResult(norm, content_hash(raw), len(raw), created=False)
        if new_text != text:
            self._queue_commit([norm], actor_name, message or f"update {norm}")
        return result

    def delete(self, rel: str, *, actor: str | None = None, message: str | None = None) -> str:
        norm, target = self.resolve(rel)
        with self.lock(norm):
            if not target.is_file():
                raise NotFound(f"no such file in the store: {norm}")
            target.unlink()
            _fsync_dir(target.parent)
        self._queue_commit(
            [norm], (actor or "").strip() or "anonymous", message or f"delete {norm}"
        )
        return norm

    def _queue_commit(self, rels: list[str], actor: str, message: str) -> None:
        if self.settings.store.git_commit:
            self.git.queue(rels, actor, message)

    def commit_pending(self) -> None:
        self.git.flush()

    def close(self) -> None:
        """Commit what is queued and release the lock files' descriptors."""
        self.git.close()
        for lock in (self._lock, *self._stripes):
            lock.close()

    @property
    def config_file(self) -> Path:
        return config_path(self.root)


def _append_list(fm: Any, key: str, entry: dict[str, str]) -> None:
    current = fm.get(key)
    if isinstance(current, list):
        current.append(entry)
    elif current is None:
        fm[key] = [entry]
    else:  # an unexpected shape is kept, never dropped
        fm[key] = [current, entry]
