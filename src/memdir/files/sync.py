"""A store's files travelling through git: commit what is pending, fetch, integrate, push.

The policy for what two machines both changed is memdir's, not git's:

- turn records, work logs and episodes have unique ids and are only ever added, so two sides
  never touch the same one (the rare identical edit, such as a ``distilled`` mark, merges
  cleanly);
- generated files (the routers, ``SNAPSHOT.md``, ``LESSONS.md``, a bundle's indexes and
  ``log.md``) are taken from this side when both changed them, and the caller regenerates
  them from the merged files;
- ``.memdir/runs.tsv`` keeps the rows of both sides;
- any other file changed on both sides (a page, the config) keeps this side's version in
  place and the other side's under ``conflicts/<commit>/<path>``, recorded in
  ``conflicts/<commit>/CONFLICTS.tsv``; nothing is merged line by line behind the user's back
  and no edit is lost. A file deleted on one side and changed on the other keeps the change.

Every step is safe to kill: a merge left half done is undone and done again by the next
sync (git's own ``MERGE_HEAD``), local commits stay until a push takes them.
"""

from __future__ import annotations

import os
import posixpath
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ..doc import paths
from ..errors import ConfigError, GitError, SyncError, UnsafePath
from ..records import asdict, field, recordclass
from .atomic import atomic_write
from .gitrun import clear_stale_git_locks, identity_env
from .locks import FileLock

CONFLICTS = "conflicts/"
LEDGER = "CONFLICTS.tsv"
LEDGER_HEADER = "path\tkind\tours\ttheirs\tdate\n"
UNION_FILES = frozenset({".memdir/runs.tsv"})
TRACKED_PRIVATE = frozenset({".memdir/config.toml", ".memdir/runs.tsv"})  # what travels of .memdir
TOP_GENERATED = frozenset({"SNAPSHOT.md", "LESSONS.md", "index.md", "episodes/index.md"})
PUSH_ATTEMPTS = 3
TIMEOUT_SECONDS = 300.0


def generated(rel: str) -> bool:
    """True for the files memdir writes from other files and can always write again."""
    if rel in TOP_GENERATED:
        return True
    return rel.startswith("wiki/") and posixpath.basename(rel) in ("index.md", "log.md")


@recordclass(frozen=True)
class Kept:
    """A file both sides changed: this side's version stays at ``path``, the other side's
    is at ``copy`` (empty when there was nothing to keep: the other side deleted it)."""

    path: str
    kind: str  # "both changed", "added on both", "deleted here", "deleted there"
    copy: str = ""


@recordclass
class Integration:
    before: str  # HEAD before the merge
    after: str  # HEAD after it (equal when nothing arrived)
    arrived: int = 0  # commits of the other side this side did not have
    touched: list[str] = field(default_factory=list)  # paths the merge changed here
    kept: list[Kept] = field(default_factory=list)
    regenerate: bool = False  # a generated file may be out of step: write them again
    fast_forward: bool = False  # the other side's tree taken as it is


class Git:
    """git in the store's folder, with memdir's identity and a bound on each call."""

    def __init__(self, root: Path, actor: str = "memdir-sync") -> None:
        self.root = root
        self.env = identity_env(actor)
        self.env["GIT_TERMINAL_PROMPT"] = "0"  # never wait for a password

    def run(
        self, *args: str, check: bool = True, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        try:
            proc = subprocess.run(
                ["git", "-c", "core.quotepath=false", *args],
                cwd=self.root,
                env=self.env,
                input=stdin,
                capture_output=True,
                timeout=TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SyncError(f"git {args[0]} took over {TIMEOUT_SECONDS:g} s; stopped") from exc
        except OSError as exc:
            raise GitError(f"git could not be run: {exc}") from exc
        if check and proc.returncode != 0:
            raise GitError(f"git {args[0]} failed: {last_line(proc)}")
        return proc

    def text(self, *args: str) -> str:
        return self.run(*args).stdout.decode("utf-8", "replace").strip()

    def head(self) -> str:
        proc = self.run("rev-parse", "--verify", "-q", "HEAD", check=False)
        return proc.stdout.decode().strip() if proc.returncode == 0 else ""

    def names(self, *args: str) -> list[str]:
        out = self.run(*args, "-z").stdout
        return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


def last_line(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines = [ln.strip() for ln in proc.stderr.decode("utf-8", "replace").splitlines()]
    useful = [ln for ln in lines if ln and not ln.startswith("hint:")]
    return useful[-1] if useful else f"exit code {proc.returncode}"


class GitSync:
    """One store's sync with one remote branch. Hold :meth:`locked` around the steps."""

    def __init__(self, root: Path, lock: FileLock, remote: str, branch: str = "") -> None:
        self.root = root
        self.git = Git(root)
        self.lock = lock
        self.remote = remote
        self._branch = branch

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The store's git lock (the one every memdir commit takes), held for the whole
        sync so no commit lands in the middle of a merge."""
        with self.lock.hold():
            clear_stale_git_locks(self.root)
            yield

    # -- where to ------------------------------------------------------------------------

    def check_remote(self) -> str:
        if not (self.root / ".git").is_dir():
            raise ConfigError(f"{self.root} is not a git repository: sync needs git")
        proc = self.git.run("remote", "get-url", "--", self.remote, check=False)
        if proc.returncode != 0:
            raise ConfigError(
                f"no git remote {self.remote!r} in {self.root}: add one with "
                f"`git -C {self.root} remote add {self.remote} URL`"
            )
        return proc.stdout.decode("utf-8", "replace").strip()

    @property
    def branch(self) -> str:
        if not self._branch:
            proc = self.git.run("symbolic-ref", "--short", "-q", "HEAD", check=False)
            name = proc.stdout.decode().strip()
            if proc.returncode != 0 or not name:
                raise SyncError("HEAD is detached: check out a branch before syncing")
            self._branch = name
        return self._branch

    @property
    def tracking(self) -> str:
        return f"refs/remotes/{self.remote}/{self.branch}"

    # -- steps ---------------------------------------------------------------------------

    def finish_interrupted(self) -> bool:
        """Undo a merge a killed sync left half done (the next step does it again)."""
        if not (self.root / ".git" / "MERGE_HEAD").exists():
            return False
        self.git.run("merge", "--abort", check=False)
        if (self.root / ".git" / "MERGE_HEAD").exists():  # --abort refused: reset the merge
            self.git.run("reset", "--merge")
        return True

    def commit_pending(self) -> bool:
        """Commit files changed outside memdir's own commits (hand edits, a killed writer's
        files): everything git does not ignore, but under ``.memdir/`` only what git
        already tracks (the config, runs.tsv); the rest there is this machine's own."""
        self.git.run("add", "-A", "--", ".", ":(exclude).memdir")
        self.git.run("add", "-u", "--", ".memdir")
        if self.git.run("diff", "--cached", "--quiet", check=False).returncode == 0:
            return False
        self.git.run("commit", "-q", "--no-verify", "-m", "sync: files changed outside memdir")
        return True

    def fetch(self) -> bool:
        """Fetch the remote branch; False when the remote has no such branch yet."""
        proc = self.git.run("fetch", "-q", "--no-tags", self.remote, check=False)
        if proc.returncode != 0:
            raise SyncError(
                f"fetching from {self.remote!r} failed: {last_line(proc)}; nothing was changed "
                "here, the next sync tries again"
            )
        probe = ("rev-parse", "--verify", "-q", self.tracking)
        return self.git.run(*probe, check=False).returncode == 0

    def integrate(self) -> Integration:
        """Merge the fetched branch into this one, by the policy of this module."""
        before = self.git.head()
        theirs = self.git.text("rev-parse", self.tracking)
        if (
            before
            and self.git.run("merge-base", "--is-ancestor", theirs, before, check=False).returncode
            == 0
        ):
            return Integration(before, before)  # nothing new there
        arrived = int(
            self.git.text("rev-list", "--count", f"{before}..{theirs}" if before else theirs)
        )
        if not before:  # an empty repository here: take theirs as it is
            self.git.run("reset", "-q", "--keep", theirs)
            return self._integrated(before, self.git.head(), [], arrived)
        if self.git.run("merge-base", "--is-ancestor", before, theirs, check=False).returncode == 0:
            proc = self.git.run("merge", "-q", "--ff-only", theirs, check=False)
            if proc.returncode != 0:
                raise SyncError(
                    f"taking {self.remote}/{self.branch} failed: {last_line(proc)}; nothing was "
                    "changed here (a file memdir is writing now may be in the way), the next "
                    "sync tries again"
                )
            return self._integrated(before, self.git.head(), [], arrived, fast_forward=True)
        proc = self.git.run(
            "merge",
            "--no-ff",
            "--no-commit",
            "--no-edit",
            "--no-verify",
            "--allow-unrelated-histories",  # two stores made apart, joined by their first sync
            theirs,
            check=False,
        )
        kept: list[Kept] = []
        conflicted = self.git.names("diff", "--name-only", "--diff-filter=U")
        if proc.returncode != 0 and not conflicted:
            self.finish_interrupted()
            raise SyncError(
                f"merging {self.remote}/{self.branch} failed: {last_line(proc)}; nothing was "
                "changed here (a file memdir is writing now may be in the way), the next "
                "sync tries again"
            )
        if (self.root / ".git" / "MERGE_HEAD").exists():
            if conflicted:
                kept = self._resolve(conflicted, before, theirs)
            message = f"sync: merge {self.remote}/{self.branch}"
            if kept:
                message += f" ({len(kept)} file(s) changed on both sides kept: {CONFLICTS})"
            self.git.run("commit", "-q", "--no-verify", "-m", message)
        return self._integrated(before, self.git.head(), kept, arrived)

    def _integrated(
        self,
        before: str,
        after: str,
        kept: list[Kept],
        arrived: int,
        *,
        fast_forward: bool = False,
    ) -> Integration:
        touched = self.git.names("diff", "--name-only", before or EMPTY_TREE, after)
        # A fast-forward takes a tree another memdir left whole: its generated files already
        # agree with its pages, so there is nothing to write again.
        regen = not fast_forward and any(
            generated(p) or p.startswith(("wiki/", "episodes/", "threads/")) or p == "PROGRAM.md"
            for p in touched
        )
        return Integration(before, after, arrived, touched, kept, regen, fast_forward)

    def _resolve(self, conflicted: list[str], ours: str, theirs: str) -> list[Kept]:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        folder = f"{CONFLICTS}{theirs[:12]}/"
        kept: list[Kept] = []
        for rel in conflicted:
            here = self._blob(ours, rel)
            there = self._blob(theirs, rel)
            if rel in UNION_FILES and here is not None and there is not None:
                self._put(rel, union_lines(here, there))
            elif generated(rel):
                self._put(rel, here if here is not None else there)
            elif there is None:  # deleted there, changed here: the change stays
                self._put(rel, here)
                kept.append(Kept(rel, "deleted there"))
            elif here is None:  # deleted here, changed there: their change comes back
                self._put(rel, there)
                kept.append(Kept(rel, "deleted here"))
            else:
                base = self.git.run("merge-base", ours, theirs, check=False).stdout.decode()
                had = self._blob(base.strip(), rel) if base.strip() else None
                copy = folder + rel
                self._put(rel, here)
                self._put(copy, there)
                kept.append(Kept(rel, "both changed" if had is not None else "added on both", copy))
        if kept:
            ledger = folder + LEDGER
            rows = "".join(
                f"{tsv(k.path)}\t{k.kind}\t{ours[:12]}\t{theirs[:12]}\t{stamp}\n" for k in kept
            )
            prior = self._read(ledger)
            self._put(ledger, (prior or LEDGER_HEADER.encode()) + rows.encode())
        return kept

    def _blob(self, commit: str, rel: str) -> bytes | None:
        proc = self.git.run("cat-file", "blob", f"{commit}:{rel}", check=False)
        return proc.stdout if proc.returncode == 0 else None

    def _read(self, rel: str) -> bytes | None:
        target = target_of(self.root, rel)
        return target.read_bytes() if target.is_file() else None

    def _put(self, rel: str, data: bytes | None) -> None:
        try:
            target = target_of(self.root, rel)
        except UnsafePath as exc:
            self.finish_interrupted()
            raise SyncError(f"the remote's {rel!r} cannot be written here: {exc}") from exc
        if data is None:
            self.git.run("rm", "-q", "--cached", "--ignore-unmatch", "--", rel)
            if target.is_file() or target.is_symlink():
                target.unlink()
            return
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise SyncError(f"{rel}: not a regular file here; move it away and sync again")
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data)
        self.git.run("add", "-f", "--", rel)

    def push(self) -> str:
        """Push; "ok", "rejected" (the remote moved: fetch and integrate again) or raise."""
        proc = self.git.run(
            "push", "-q", "--porcelain", self.remote, f"HEAD:refs/heads/{self.branch}", check=False
        )
        if proc.returncode == 0:
            return "ok"
        said = proc.stdout.decode("utf-8", "replace") + proc.stderr.decode("utf-8", "replace")
        if "[rejected]" in said and ("fetch first" in said or "non-fast-forward" in said):
            return "rejected"
        raise SyncError(
            f"pushing to {self.remote!r} failed: {last_line(proc)}; the commits stay here and "
            "the next sync pushes them"
        )

    def ahead(self) -> int:
        """Local commits the remote branch does not have."""
        probe = ("rev-parse", "--verify", "-q", self.tracking)
        if self.git.run(*probe, check=False).returncode != 0:
            return int(self.git.text("rev-list", "--count", "HEAD") or 0)
        return int(self.git.text("rev-list", "--count", f"{self.tracking}..HEAD") or 0)


def clone(url: str, directory: Path, branch: str = "") -> str:
    """``git clone`` of a store into ``directory`` (which must not hold anything); the
    branch checked out."""
    if directory.exists() and any(directory.iterdir()):
        raise ConfigError(f"{directory} is not empty: clone into a new folder")
    git = Git(directory.parent if directory.parent.exists() else Path.cwd())
    args = ["clone", "-q", *(["--branch", branch] if branch else []), "--", url, str(directory)]
    proc = git.run(*args, check=False)
    if proc.returncode != 0:
        raise SyncError(f"cloning {url} failed: {last_line(proc)}")
    inside = Git(directory)
    if not inside.head():  # the remote's HEAD names no branch: take main, else the only one
        listed = inside.text("for-each-ref", "--format=%(refname:strip=3)", "refs/remotes/origin/")
        names = [n for n in listed.splitlines() if n and n != "HEAD"]
        pick = "main" if "main" in names else (names[0] if len(names) == 1 else "")
        if not pick:
            raise SyncError(f"{url} has no branch to check out; name one with --branch")
        inside.run("checkout", "-q", "-b", pick, "--track", f"origin/{pick}")
    return inside.text("symbolic-ref", "--short", "HEAD")


def target_of(root: Path, rel: str) -> Path:
    """Where a file sync writes lives: in the store (no symlink out of it), or one of the
    two files of ``.memdir/`` that are committed."""
    if rel in TRACKED_PRIVATE:
        return root / rel
    return paths.confine(root, rel)[1]


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's id of the empty tree


def union_lines(here: bytes, there: bytes) -> bytes:
    """This side's lines, then the other side's lines this side lacks, in their order."""
    mine = here.splitlines(keepends=True)
    if mine and not mine[-1].endswith(b"\n"):
        mine[-1] += b"\n"
    seen = set(mine)
    extra = [ln if ln.endswith(b"\n") else ln + b"\n" for ln in there.splitlines(keepends=True)]
    return b"".join(mine + [ln for ln in extra if ln not in seen])


def tsv(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def untsv(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append({"t": "\t", "n": "\n", "\\": "\\"}.get(nxt, "\\" + nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


@recordclass(frozen=True)
class Open:
    """A file changed on both sides and not resolved yet."""

    path: str
    kind: str
    copy: str  # the other side's version ("" when it deleted the file)
    ours: str
    theirs: str
    date: str
    ledger: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def open_conflicts(root: Path) -> list[Open]:
    """Every conflict recorded under ``conflicts/`` whose row is still in its ledger."""
    base = root / CONFLICTS
    if not base.is_dir():
        return []
    found: list[Open] = []
    for entry in sorted(os.listdir(base)):
        ledger = f"{CONFLICTS}{entry}/{LEDGER}"
        target = root / ledger
        if not target.is_file() or target.is_symlink():
            continue
        for line in target.read_text(encoding="utf-8", errors="replace").splitlines()[1:]:
            cols = line.split("\t")
            if len(cols) != 5:
                continue
            rel, kind, ours, theirs, date = untsv(cols[0]), *cols[1:]
            copy = f"{CONFLICTS}{entry}/{rel}" if kind in ("both changed", "added on both") else ""
            found.append(Open(rel, kind, copy, ours, theirs, date, ledger))
    return found


def drop_rows(root: Path, ledger: str, rels: Iterable[str]) -> bytes | None:
    """The ledger's text without the rows of ``rels`` (None when no row is left)."""
    gone = set(rels)
    lines = (root / ledger).read_text(encoding="utf-8").splitlines(keepends=True)
    rows = [ln for ln in lines[1:] if untsv(ln.split("\t", 1)[0]) not in gone]
    return (lines[0] + "".join(rows)).encode() if rows else None
