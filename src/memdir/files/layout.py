"""A store's layout on disk: its folders, its .gitignore and templates, how a store is found
from a folder, and how a new one is made (git init and the first commit included)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import (
    Conflict,
    InvalidInput,
    StoreExists,
    StoreNotFound,
)

ROOT_ENV = "MEMDIR_ROOT"


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
    from importlib import resources

    return resources.files("memdir").joinpath("templates", name).read_text(encoding="utf-8")


def create(directory: Path, *, force: bool = False, git: bool = True) -> Path:
    """Create the store layout in ``directory``; refuse an existing store unless ``force``,
    and a folder inside another store (Conflict naming the outer store).

    Never overwrites an existing file, even with ``force``: it only adds what is missing.
    """
    # Only creating a store needs these; finding one (every hook) does not.
    from ..settings import default_config_toml, harness_digest, pin_harness, pinned_harness
    from .atomic import atomic_write
    from .gitrun import run_git

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
    import shutil  # not at the top: a hook needs none (test_hook_imports)

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
