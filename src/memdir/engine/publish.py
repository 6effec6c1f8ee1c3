"""bundle publish: one bundle as a standalone OKF v0.2 git repository with its own history.

The published repository holds, at its root, the bundle's files as ``wiki/<bundle>/`` holds
them; beside them the sources its articles cite, at the store paths their citations name
(``inbox/<id>-<name>.md``), so every ``[^src-id]`` resolves inside the repository; and
``relations.json``, the machine-readable list of the cross-bundle relations (``related``
entries and links of the form ``../<bundle>/topic/x.md``) with the sources it carries.

Its history is the store's: one commit per store commit that changed what the repository
holds, with that commit's author, committer, dates and message (so a replay of the same
history gives the same commit ids). A git note on each commit (``refs/notes/memdir-publish``)
names the store commit it replays; the next publish reads the note of the tip and replays
only the store commits after it. Every file is the store's blob, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..doc import frontmatter
from ..errors import ConfigError, Conflict, GitError, InvalidInput, NotFound, UnsafePath
from ..files.gitrun import identity_env
from ..files.locks import FileLock
from ..records import field, recordclass
from . import okf
from .program import BUNDLE_NAME

if TYPE_CHECKING:
    from ..files.store import Store

RELATIONS = "relations.json"
NOTES = "refs/notes/memdir-publish"
BRANCH = "refs/heads/main"
_SCP_LIKE = re.compile(r"^[A-Za-z0-9._~-]+@[A-Za-z0-9.-]+:")
_MODES = ("100644", "100755")  # regular files; links and submodules are not published


# -- git, as bytes ------------------------------------------------------------------------


def _git(cwd: Path, *args: str, stdin: bytes | None = None, check: bool = True) -> bytes:
    try:
        proc = subprocess.run(
            ["git", "-C", str(cwd), "-c", "protocol.ext.allow=never", *args],
            input=stdin,
            capture_output=True,
            env={**identity_env("memdir"), "GIT_TERMINAL_PROMPT": "0"},  # never wait for a password
            check=False,
        )
    except FileNotFoundError:
        raise GitError("git is not installed: bundle publish needs it") from None
    if check and proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise GitError(f"git {args[0]} failed: {err}")
    return proc.stdout if proc.returncode == 0 else b"\x00failed"


def _ok(cwd: Path, *args: str) -> bool:
    return _git(cwd, *args, check=False) != b"\x00failed"


def _text(cwd: Path, *args: str) -> str:
    return _git(cwd, *args).decode("utf-8", "surrogateescape").strip()


def _cat(cwd: Path, shas: Sequence[str]) -> dict[str, bytes]:
    """The objects ``shas`` names, read by one ``git cat-file --batch``."""
    if not shas:
        return {}
    out = _git(cwd, "cat-file", "--batch", stdin="".join(f"{s}\n" for s in shas).encode())
    found: dict[str, bytes] = {}
    pos = 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        head = out[pos:end].decode().split()
        if len(head) < 3:  # "<sha> missing"
            pos = end + 1
            continue
        size = int(head[2])
        found[head[0]] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return found


def _tree(cwd: Path, commit: str, *paths: str) -> dict[str, tuple[str, str]]:
    """``path -> (mode, blob)`` of the regular files under ``paths`` at ``commit``."""
    out = _git(
        cwd, "--literal-pathspecs", "ls-tree", "-r", "-z", "--full-tree", commit, "--", *paths
    )
    tree: dict[str, tuple[str, str]] = {}
    for record in out.split(b"\x00"):
        if not record:
            continue
        meta, _, name = record.partition(b"\t")
        mode, kind, sha = meta.decode().split()
        if kind == "blob" and mode in _MODES:
            tree[name.decode("utf-8", "surrogateescape")] = (mode, sha)
    return tree


def blob_id(data: bytes) -> str:
    """The id git gives ``data`` as a blob."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


# -- what one commit of the bundle holds ----------------------------------------------------


@recordclass
class Snapshot:
    files: dict[str, tuple[str, str]]  # repository path -> (mode, blob)
    relations: bytes  # relations.json
    carried: list[str] = field(default_factory=list)  # the store paths of carried sources
    cross: int = 0


@recordclass
class _Reader:
    """Reads the bundle at any store commit; parsed article blobs are kept by blob id."""

    root: Path
    bundle: str
    refs: dict[str, list[okf.Reference]] = field(default_factory=dict)
    links: dict[str, list[str]] = field(default_factory=dict)  # a source blob's link targets

    def snapshot(self, commit: str) -> Snapshot:
        prefix = f"wiki/{self.bundle}/"
        own = {p[len(prefix) :]: v for p, v in _tree(self.root, commit, prefix).items()}
        wanted = [
            (path, sha)
            for path, (_, sha) in own.items()
            if path.endswith(".md") and posixpath.basename(path) not in okf.RESERVED
        ]
        blobs = _cat(self.root, [s for _, s in wanted if s not in self.refs])
        for path, sha in wanted:
            if sha not in self.refs:
                parsed = frontmatter.parse(blobs.get(sha, b"").decode("utf-8", "replace"))
                fm = parsed.fm if not parsed.error else {}
                self.refs[sha] = okf.references(path, fm, parsed.body)
        cited: dict[str, set[str]] = {}
        relations: list[dict[str, str]] = []
        for path, sha in sorted(wanted):
            for ref in self.refs[sha]:
                if ref.kind == "source" and ref.path and carriable(ref.path):
                    cited.setdefault(ref.path, set()).add(path)
                elif ref.bundle and ref.path:  # outside the bundle: ../<bundle>/...
                    item = {"from": path, "kind": ref.kind, "to": ref.target}
                    item.update({"bundle": ref.bundle, "path": ref.path.split("/", 2)[2]})
                    if item not in relations:
                        relations.append(item)
        carried = _tree(self.root, commit, *sorted(cited)) if cited else {}
        linked = self._linked(carried) - set(carried)
        if linked:  # what a carried source links to (a thread page's turn records) travels too
            carried.update(_tree(self.root, commit, *sorted(linked)))
        clash = sorted(set(carried) & set(own))
        if clash:
            raise Conflict(
                f"bundle '{self.bundle}' has a file where a cited source goes: {clash[0]}; "
                "rename its folder before publishing"
            )
        document = {
            "okf_version": okf.OKF_VERSION,
            "bundle": self.bundle,
            "relations": relations,
            "sources": [
                {"resource": r, "cited_by": sorted(cited[r]), "carried": r in carried}
                for r in sorted(cited)
            ],
        }
        data = (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        files = {**own, **carried, RELATIONS: ("100644", blob_id(data))}
        return Snapshot(files, data, carried=sorted(carried), cross=len(relations))

    def _linked(self, carried: dict[str, tuple[str, str]]) -> set[str]:
        """The store files the carried sources link to (one step, plain relative paths)."""
        pages = {p: sha for p, (_, sha) in carried.items() if p.endswith(".md")}
        fresh = [sha for sha in pages.values() if sha not in self.links]
        for sha, blob in _cat(self.root, fresh).items():
            parsed = frontmatter.parse(blob.decode("utf-8", "replace"))
            self.links[sha] = [r.target for r in okf.references("", {}, parsed.body)]
        found: set[str] = set()
        for path, sha in pages.items():
            for target in self.links.get(sha, []):
                norm = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
                if carriable(norm):
                    found.add(norm)
        return found


def carriable(resource: str) -> bool:
    """A resource a publish may carry: a plain store path outside ``wiki/``."""
    return okf.plain_relative(resource) and not resource.startswith("wiki/")


# -- the target ------------------------------------------------------------------------------


@recordclass(frozen=True)
class Target:
    to: str
    repo: Path  # the repository the commits are imported into
    remote: str | None  # pushed to afterwards (None: ``repo`` is the published folder)


def is_remote(to: str) -> bool:
    if "://" in to or to.startswith("file:") or _SCP_LIKE.match(to):
        return True
    path = Path(to).expanduser()
    return (
        path.is_dir()
        and not (path / ".git").exists()
        and (path / "HEAD").is_file()
        and (path / "objects").is_dir()
        and (path / "refs").is_dir()
    )


def check_to(to: str, store_root: Path) -> None:
    if not to.strip() or to != to.strip() or any(c in to for c in "\x00\n\r"):
        raise InvalidInput(f"--to must be a folder or a git URL, got {to!r}")
    if to.startswith("-"):
        raise UnsafePath(f"--to {to!r} starts with '-': git would read it as an option")
    if "://" in to or _SCP_LIKE.match(to):
        return  # not a folder of this machine
    path = Path(to).expanduser().resolve()
    store = store_root.resolve()
    if path == store or store in path.parents:
        raise UnsafePath(f"--to {to}: a bundle is not published inside its own store")


def check_bundle(name: str, known: Sequence[str]) -> None:
    if not BUNDLE_NAME.fullmatch(name):
        raise InvalidInput(
            f"bundle name {name!r} is not one memdir gives: lowercase letters, digits, '-' and '_'"
        )
    if name not in known:
        raise NotFound(f"no bundle named '{name}'")


def _note_of(repo: Path, commit: str) -> dict[str, str]:
    out = _git(repo, "notes", f"--ref={NOTES}", "show", commit, check=False)
    if out == b"\x00failed":
        return {}
    pairs = (line.partition(": ") for line in out.decode("utf-8", "replace").splitlines())
    return {k: v for k, _, v in pairs if v}


def _previous(repo: Path, bundle: str, to: str) -> tuple[str | None, str | None]:
    """(tip, store commit it replays) of a previous publish of ``bundle``; (None, None) when
    the repository is empty. Anything else in it is refused."""
    if not _ok(repo, "rev-parse", "--verify", "-q", f"{BRANCH}^{{commit}}"):
        if _text(repo, "for-each-ref", "--count=1", "--format=%(refname)"):
            raise Conflict(f"{to} holds a git history that is not a publish of '{bundle}'")
        return None, None
    tip = _text(repo, "rev-parse", f"{BRANCH}^{{commit}}")
    note = _note_of(repo, tip)
    if note.get("bundle") != bundle or not note.get("store-commit"):
        what = f"a publish of '{note['bundle']}'" if note.get("bundle") else "not a memdir publish"
        raise Conflict(f"{to} is {what}: refused, so nothing of it is overwritten")
    return tip, note["store-commit"]


def _prepare_dir(to: str) -> Path:
    path = Path(to).expanduser()
    if path.exists() and not path.is_dir():
        raise InvalidInput(f"--to {to} is a file, not a folder")
    if path.is_dir() and any(path.iterdir()):
        if not (path / ".git").is_dir():
            raise Conflict(f"{to} is not empty and not a previous publish: refused")
        return path
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    return path


def _dirty(repo: Path) -> bool:
    return bool(_git(repo, "status", "--porcelain", "--untracked-files=all").strip())


# -- the import ------------------------------------------------------------------------------


def _quote(path: str) -> str:
    escaped = path.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def _headers(raw: bytes) -> tuple[bytes, bytes, bytes]:
    """(author line, committer line, message) of a raw commit object."""
    head, _, message = raw.partition(b"\n\n")
    lines = head.split(b"\n")
    author = next(line for line in lines if line.startswith(b"author "))
    committer = next(line for line in lines if line.startswith(b"committer "))
    return author, committer, message


def _stream(
    store: Path,
    bundle: str,
    plan: list[tuple[str, Snapshot]],
    have: set[str],
    tip: str | None,
    notes_tip: str | None,
) -> Iterator[bytes]:
    raws = _cat(store, [c for c, _ in plan])
    new = sorted({sha for _, s in plan for _, sha in s.files.values()} - have)
    contents = _cat(store, new)
    marks: dict[str, int] = {}
    commits: list[int] = []
    for number, (commit, snap) in enumerate(plan, start=1):
        for path, (_, sha) in sorted(snap.files.items()):
            if sha in have or sha in marks:
                continue
            data = snap.relations if path == RELATIONS else contents[sha]
            marks[sha] = len(marks) + len(commits) + 1
            yield b"blob\nmark :%d\n" % marks[sha] + _data(data)
        author, committer, message = _headers(raws[commit])
        commits.append(len(marks) + len(commits) + 1)
        yield b"commit %s\nmark :%d\n" % (BRANCH.encode(), commits[-1])
        yield author + b"\n" + committer + b"\n" + _data(message)
        if number == 1 and tip:
            yield f"from {tip}\n".encode()
        yield b"deleteall\n"
        for path, (mode, sha) in sorted(snap.files.items()):
            ref = f":{marks[sha]}" if sha in marks else sha
            yield f"M {mode} {ref} {_quote(path)}\n".encode("utf-8", "surrogateescape")
        yield b"\n"
    last = _headers(raws[plan[-1][0]])[1]
    yield f"commit {NOTES}\n".encode() + last + b"\n"
    yield _data(f"publish {bundle}: {len(plan)} commit(s)".encode())
    if notes_tip:
        yield f"from {notes_tip}\n".encode()
    for mark, (commit, _) in zip(commits, plan, strict=True):
        note = f"memdir-publish\nbundle: {bundle}\nstore-commit: {commit}\n".encode()
        yield b"N inline :%d\n" % mark + _data(note)
    yield b"\ndone\n"


def bundle(store: Store, known: Sequence[str], name: str, to: str) -> dict[str, Any]:
    """``memdir bundle publish NAME --to TO``: the checks, the store's pending commits made,
    then :func:`publish`."""
    check_bundle(name, known)
    check_to(to, store.root)
    if not store.settings.store.git_commit:
        raise ConfigError("bundle publish replays the store's git history: store.git_commit is off")
    store.commit_pending()  # the history holds every write made so far
    return publish(store.root, name, to)


def publish(store_root: Path, bundle: str, to: str) -> dict[str, Any]:
    """Publish ``wiki/<bundle>/`` of the store at ``store_root`` to ``to`` (a folder, a bare
    repository or any git remote); incremental after the first time."""
    if not (store_root / ".git").exists():
        raise ConfigError("bundle publish replays the store's git history, and it has none")
    if not _ok(store_root, "rev-parse", "--verify", "-q", "HEAD"):
        raise NotFound("the store has no commit yet: nothing to publish")
    remote = is_remote(to)
    key = hashlib.sha256(
        (to if remote else str(Path(to).expanduser().resolve())).encode()
    ).hexdigest()[:16]
    work = store_root / ".memdir" / "publish"
    work.mkdir(parents=True, exist_ok=True)
    with FileLock(work / f"{key}.lock", timeout=120).hold():
        if remote:
            repo = work / f"{key}.git"
            if not (repo / "HEAD").is_file():
                _git(work, "init", "-q", "--bare", str(repo))
            url = to if "://" in to or _SCP_LIKE.match(to) else str(Path(to).expanduser().resolve())
            target = Target(to, repo, url)
            listed = _text(repo, "ls-remote", url)
            for ref in (BRANCH, NOTES):
                _git(repo, "update-ref", "-d", ref, check=False)
            if listed:
                names = {line.split("\t", 1)[1] for line in listed.splitlines() if "\t" in line}
                if BRANCH not in names or NOTES not in names:
                    raise Conflict(f"{to} is not empty and not a previous publish: refused")
                _git(repo, "fetch", "-q", url, f"+{BRANCH}:{BRANCH}", f"+{NOTES}:{NOTES}")
        else:
            target = Target(to, _prepare_dir(to), None)
        return _publish_into(store_root, bundle, target)


def _publish_into(store: Path, bundle: str, target: Target) -> dict[str, Any]:
    repo = target.repo
    tip, since = _previous(repo, bundle, target.to)
    head_ref = _git(repo, "symbolic-ref", "-q", "HEAD", check=False).strip()
    if target.remote is None and tip and head_ref != BRANCH.encode():
        raise Conflict(f"{target.to} has another branch checked out than main: refused")
    if target.remote is None and tip and _dirty(repo):
        # A publish killed between its import and its checkout left the branch moved: the
        # folder still matches the commit before, so the checkout is finished now.
        before = _git(repo, "rev-parse", "-q", "--verify", f"{BRANCH}@{{1}}", check=False)
        if before == b"\x00failed" or not _ok(repo, "diff", "--quiet", before.decode().strip()):
            raise Conflict(
                f"{target.to} has changes of its own (git -C {target.to} status): "
                "commit them elsewhere or discard them, then publish again"
            )
        _git(repo, "reset", "-q", "--hard", BRANCH)
    head = _text(store, "rev-parse", "HEAD")
    if since and not _ok(store, "merge-base", "--is-ancestor", since, head):
        raise Conflict(
            f"{target.to} was published from store commit {since[:12]}, which this store's "
            "history does not hold: publish to a new target"
        )
    reader = _Reader(store, bundle)
    paths = [f"wiki/{bundle}/"]
    current = reader.snapshot(head)
    paths += current.carried
    span = [f"{since}..{head}"] if since else [head]
    log = _text(
        store,
        "--literal-pathspecs",
        "log",
        "--reverse",
        "--topo-order",
        "--format=%H",
        *span,
        "--",
        *sorted(set(paths)),
    )
    previous = _tree(repo, tip) if tip else {}
    plan: list[tuple[str, Snapshot]] = []
    for commit in log.split():
        snap = reader.snapshot(commit)
        if snap.files != previous and len(snap.files) > 1:  # more than relations.json
            plan.append((commit, snap))
            previous = snap.files
    if not plan and not tip:
        raise NotFound(f"nothing of bundle '{bundle}' is committed in the store yet")
    if plan:
        have = {sha for _, sha in _tree(repo, tip).values()} if tip else set()
        notes_tip = _text(repo, "rev-parse", "-q", "--verify", NOTES) if tip else None
        stream = b"".join(_stream(store, bundle, plan, have, tip, notes_tip or None))
        _git(repo, "fast-import", "--quiet", "--done", stdin=stream)
        if target.remote is None:
            _git(repo, "reset", "-q", "--hard", BRANCH)
    new_tip = _text(repo, "rev-parse", BRANCH)
    if target.remote is not None and plan:
        _git(repo, "push", "-q", target.remote, f"{BRANCH}:{BRANCH}", f"{NOTES}:{NOTES}")
        bare = Path(target.remote).expanduser()
        if not tip and bare.is_dir() and not _ok(bare, "rev-parse", "-q", "--verify", "HEAD"):
            _git(bare, "symbolic-ref", "HEAD", BRANCH)  # a clone checks out the bundle
    final = plan[-1][1] if plan else current
    return {
        "bundle": bundle,
        "to": target.to,
        "commits": len(plan),
        "head": new_tip,
        "store_commit": plan[-1][0] if plan else since,
        "files": len(final.files),
        "sources": len(final.carried),
        "relations": final.cross,
        "incremental": tip is not None,
    }


def audit_folder(folder: Path) -> list[str]:
    """The OKF v0.2 verdict of a published bundle on its own (an empty list: conformant).

    Structure as :func:`okf.conformance` checks it, and every cross-reference: inside the
    folder a file, a source a file at its resource path, a relation into another bundle
    declared in ``relations.json``.
    """
    files: dict[str, str] = {}
    for path in sorted(folder.rglob("*.md")):
        rel = path.relative_to(folder).as_posix()
        if any(part.startswith(".") for part in rel.split("/")) or path.is_symlink():
            continue
        files[rel] = path.read_text(encoding="utf-8", errors="replace")
    problems: list[str] = []
    declared: set[tuple[str, str]] = set()
    listing = folder / RELATIONS
    if listing.is_file():
        try:
            data = json.loads(listing.read_text(encoding="utf-8"))
            for item in data.get("relations", []):
                declared.add((str(item["from"]), str(item["to"])))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            problems.append(f"{RELATIONS}: not a relations list ({exc})")

    def resolve(ref: okf.Reference) -> bool:
        if ref.path is None:
            return False
        if ref.kind == "source" or not ref.path.startswith("../"):
            target = folder / ref.path
            return target.is_file() if ref.kind != "link" else target.exists()
        return (ref.file, ref.target) in declared

    return problems + okf.conformance(files, resolve=resolve)
