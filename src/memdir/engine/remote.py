"""``memdir sync``: the store with a git remote, then the index and the generated files in step.

The steps (memdir.files.sync has the git side and the policy for files both sides changed):

1. under the store's git lock: finish a merge a killed sync left, commit what memdir has
   queued and any file changed outside memdir;
2. fetch (no lock held: a slow remote never holds up the store's writers);
3. under the lock: merge; bring the index in step for the paths the merge touched (only
   those); write the generated files again from the merged files and commit them;
4. push; when the remote moved meanwhile, back to 2 (at most three times).

A sync killed anywhere leaves either the state before a step or a commit; the next sync
goes on from there.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, NotFound, SyncError
from ..files import sync as gitsync
from ..files.atomic import atomic_write
from ..records import recordclass
from . import files, wiki

if TYPE_CHECKING:
    from .verbs import KnowledgeEngine

ACTOR = "memdir-sync"
KEEP = ("current", "other")


def run(engine: KnowledgeEngine, *, remote: str = "", branch: str = "") -> dict[str, Any]:
    """One sync; returns what it did (see docs/sync.md for the fields)."""
    settings = engine.settings.sync
    store = engine.store
    git = gitsync.GitSync(
        store.root, store.git.lock, remote or settings.remote, branch or settings.branch
    )
    url = git.check_remote()
    report: dict[str, Any] = {
        "remote": git.remote,
        "url": url,
        "branch": git.branch,
        "resumed": False,
        "committed": False,
        "arrived": 0,
        "touched": [],
        "kept": [],
        "regenerated": [],
        "pushed": 0,
        "attempts": 0,
    }
    started = time.perf_counter()
    with git.locked():
        report["resumed"] = git.finish_interrupted()
        store.git.flush()
        report["committed"] = git.commit_pending()
    for attempt in range(1, gitsync.PUSH_ATTEMPTS + 1):
        report["attempts"] = attempt
        there = git.fetch()
        if there:
            with git.locked():
                done = git.integrate()
                if done.after != done.before:
                    _arrived(engine, done, report)
        report["head"] = git.git.head()  # what this round took to the remote (at least)
        ahead = git.ahead()
        if not ahead:
            break
        if git.push() == "ok":
            report["pushed"] += ahead
            break
    else:
        raise SyncError(
            f"{git.remote!r} moved again during each of {gitsync.PUSH_ATTEMPTS} attempts; what "
            "arrived is merged here, and the next sync pushes the rest"
        )
    report["conflicts"] = len(gitsync.open_conflicts(store.root))
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def _arrived(engine: KnowledgeEngine, done: gitsync.Integration, report: dict[str, Any]) -> None:
    report["arrived"] += done.arrived
    report["touched"] = sorted(set(report["touched"]) | set(done.touched))
    report["kept"] += [{"path": k.path, "kind": k.kind, "copy": k.copy} for k in done.kept]
    indexed = [p for p in done.touched if not p.startswith(".memdir/")]
    if indexed:
        engine.index.sync_paths(indexed)
    if done.regenerate:
        report["regenerated"] += regenerate(engine, done.touched)


def regenerate(engine: KnowledgeEngine, touched: list[str] | None = None) -> list[str]:
    """Write the generated files again from the merged files, in one commit; the paths that
    changed. With ``touched`` (the paths a merge changed), only what they feed: the indexes and
    log of each bundle with a touched path, the top router when a bundle or PROGRAM.md moved,
    and LESSONS.md, SNAPSHOT.md and the router of episodes when an episode or one of those
    moved; without it, everything."""
    root = engine.store.root
    scope = _scope(touched)
    batch = files.Batch(engine.store, engine.index)
    with batch.all_or_nothing("sync"):
        prog = engine.program()
        for name in wiki.bundle_names(root, prog):
            if (root / "wiki" / name).is_dir() and (scope.every or name in scope.bundles):
                wiki.regenerate(batch, root, prog, name)
        if scope.every or scope.top:
            wiki.regenerate_top(batch, root, prog)
        if scope.every or scope.experience:
            engine.experience.reflect_into(batch, distill=False)
        written = list(batch.paths)
    batch.commit("sync: generated files written again from the merged files", actor=ACTOR)
    return written


@recordclass(frozen=True)
class _Scope:
    every: bool = False
    bundles: frozenset[str] = frozenset()
    top: bool = False
    experience: bool = False


def _scope(touched: list[str] | None) -> _Scope:
    if touched is None:
        return _Scope(every=True)
    bundles = {p.split("/")[1] for p in touched if p.startswith("wiki/") and p.count("/") >= 2}
    return _Scope(
        bundles=frozenset(bundles),
        top=bool(bundles) or any(p in ("PROGRAM.md", "index.md") for p in touched),
        # threads/ pages cite turns, and the router of episodes counts turns and threads.
        experience=any(
            p.startswith(("episodes/", "threads/")) or p in ("LESSONS.md", "SNAPSHOT.md")
            for p in touched
        ),
    )


def watch(
    engine: KnowledgeEngine,
    *,
    remote: str = "",
    branch: str = "",
    say: Callable[[dict[str, Any] | Exception], None],
    stop: Callable[[], bool] = lambda: False,
    poll_seconds: float = 0.5,
) -> None:
    """Sync after each change to the store's history, once it has been quiet for
    ``sync.debounce_seconds``, and every ``sync.interval_seconds`` anyway. A failed sync is
    reported and tried again at the next change or interval."""
    settings = engine.settings.sync
    git = gitsync.Git(engine.store.root)
    last_head = None
    changed_at: float | None = None
    next_anyway = 0.0
    while not stop():
        now = time.monotonic()
        head = git.head()
        if head != last_head:
            if last_head is not None:
                changed_at = now
            last_head = head
        quiet = changed_at is not None and now - changed_at >= settings.debounce_seconds
        if quiet or now >= next_anyway:
            try:
                report = run(engine, remote=remote, branch=branch)
                # Its own merge and regeneration are no change; a commit after it is.
                last_head = report["head"]
                say(report)
            except SyncError as exc:
                last_head = git.head()
                say(exc)
            changed_at = None
            next_anyway = time.monotonic() + settings.interval_seconds
        time.sleep(poll_seconds)


def clone(url: str, directory: str, *, branch: str = "") -> dict[str, Any]:
    """A store cloned from a git remote, its index built: ``{root, branch, documents}``."""
    from ..files.layout import find_root
    from ..index import Index

    target = Path(directory).expanduser().absolute()
    picked = gitsync.clone(url, target, branch)
    if not (target / ".memdir" / "config.toml").is_file():
        raise NotFound(f"{url} holds no memdir store (no .memdir/config.toml)")
    root = find_root(explicit=target)
    index = Index(root)
    try:
        stats = index.sync()
    finally:
        index.close()
    return {"root": str(root), "branch": picked, "documents": stats.added + stats.updated}


# -- conflicts -----------------------------------------------------------------------------


def conflicts(engine: KnowledgeEngine) -> list[dict[str, str]]:
    """Files changed on both sides that nobody resolved yet (``conflicts/``)."""
    return [c.as_dict() for c in gitsync.open_conflicts(engine.store.root)]


def resolve(engine: KnowledgeEngine, path: str, *, keep: str, actor: str = "") -> dict[str, Any]:
    """End the conflicts of ``path``: keep the version at the path now (``current``) or the
    other side's (``other``: its copy, or the deletion it made). One commit; the copies and
    ledger rows go."""
    if keep not in KEEP:
        raise InvalidInput(f"keep must be one of {', '.join(KEEP)}, got {keep!r}")
    root = engine.store.root
    mine = [c for c in gitsync.open_conflicts(root) if c.path == path]
    if not mine:
        raise NotFound(f"no open conflict for {path!r} (see `memdir sync conflicts`)")
    latest = mine[-1]
    touched: set[str] = set()
    with engine.store.git.lock.hold(), engine.store.lock():
        target = gitsync.target_of(root, path)
        if keep == "other":
            if latest.copy:
                atomic_write(target, gitsync.target_of(root, latest.copy).read_bytes())
            else:  # the other version is a deletion (made here or there)
                target.unlink(missing_ok=True)
            touched.add(path)
        for c in mine:
            copy = gitsync.target_of(root, c.copy) if c.copy else None
            if copy is not None and copy.is_file():
                copy.unlink()
                touched.add(c.copy)
            ledger = gitsync.drop_rows(root, c.ledger, [path])
            if ledger is None:
                gitsync.target_of(root, c.ledger).unlink(missing_ok=True)
            else:
                atomic_write(gitsync.target_of(root, c.ledger), ledger)
            touched.add(c.ledger)
        _prune_empty(root, [c.copy or c.ledger for c in mine])
    engine.index.sync_paths(sorted(p for p in touched if not p.startswith(".memdir/")))
    if engine.store.settings.store.git_commit and engine.store.git.enabled:
        engine.store.git.commit_now(
            sorted(touched), actor or ACTOR, f"sync: resolve {path} (kept the {keep} version)"
        )
    return {"path": path, "kept": keep, "resolved": len(mine), "files": sorted(touched)}


def _prune_empty(root: Any, rels: list[str]) -> None:
    """Remove folders under conflicts/ left empty, and conflicts/ itself."""
    base = (root / gitsync.CONFLICTS).resolve()
    for rel in rels:
        folder = (root / rel).parent
        while folder.resolve() != base and base in folder.resolve().parents:
            try:
                folder.rmdir()
            except OSError:
                break
            folder = folder.parent
    with contextlib.suppress(OSError):
        base.rmdir()  # only when empty
