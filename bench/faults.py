"""Fault rounds on one store: processes killed with SIGKILL, then the store is checked.

Each round does harm, then reopens the store (which runs recovery) and checks it:

- ``writers``: N writer processes, half through the Python API (writes, turns, purges), half
  through the CLI (``memdir write``, ``memdir forget --purge``), each killed with SIGKILL
  (its whole process group) after a random time;
- ``server``: ``memdir serve`` with C HTTP clients writing, recording turns and purging,
  killed with SIGKILL under that load;
- ``consolidate``: a ``memdir consolidate`` of fresh inbox sources killed mid-run;
- ``git-lock``: a ``.git/index.lock`` left by a killed git, then CLI writes;
- ``reindex-kill``: ``memdir reindex --full`` SIGKILLed inside its rebuild transaction (the
  kill counts as landed when the rebuild lock was held at the kill and, with no writers, the
  index's generation did not move), while ``--reindex-writers`` writer processes write; then
  200 of the notes under ``notes/``, drawn at random, must each be found by a search for the
  word it alone holds;
- ``reindex-reads``: ``memdir serve`` with reader threads (search, ls, read, grep, each
  answer checked in full by bench/reindex_load.py's readers) while full rebuilds loop.

Every writer notes each write before it starts (``try``) and once it returned (``ack``) in an
append-only log. After a round: every acknowledged write must be on disk byte for byte (or
hold a later write that was tried), committed (``git status`` does not list it), ``doctor``
must find the index in step, ``git fsck`` must pass, no temp file of a dead writer may be
left, and no file under the store outside ``.git/`` may hold the text of a purge that was
acknowledged (as written or lower-cased, as the full-text index folds it).

    .venv/bin/python bench/faults.py --rounds 10 --writers 8 --server-kills 3 --clients 16

It prints acknowledged / present / lost / uncommitted / purged-but-found per round and in
all, with the reads, read errors and rebuilds of the ``reindex-reads`` rounds (``--json``: one
JSON object); the exit status is 1 when anything was lost, left uncommitted or found after
its purge, a reader got an error or a short answer, or a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

import reindex_load  # beside this file: python puts the script's folder on sys.path

WORKLOG_SUFFIX = ".worklog.jsonl"  # beside a turn record (memdir.turns.verbs)

# A writer process: through the Python API, or through the CLI (one `memdir` per write).
WRITER = r"""
import hashlib, json, os, random, subprocess, sys
root, log_path, mode, name, seed = sys.argv[1:6]
rng = random.Random(int(seed))
fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

def note(**entry):
    os.write(fd, (json.dumps(entry) + "\n").encode())  # one write: whole or torn at a kill

def sha(data):
    return hashlib.sha256(data).hexdigest()

if mode == "api":
    from memdir.service import Memory
    mem = Memory.open(root)
    def write(rel, text):
        note(op="try", path=rel, sha=sha(text.encode()))
        result = mem.write(rel, text, actor=name)
        note(op="ack", path=rel, sha=result.hash)
    def turn(text):
        record = mem.record_turn(thread=name, input=text, output=text,
                                 worklog=[{"tool": "note", "args": {"text": text}}], actor=name)
        for rel in (record.path, record.path[:-3] + ".worklog.jsonl"):
            note(op="ack", path=rel, sha=sha((mem.root / rel).read_bytes()))
        return record.path
    def purge(rel):
        mem.forget(rel, purge=True, actor=name)
else:
    env = dict(os.environ)
    def memdir(*args, text=None):
        return subprocess.run([sys.executable, "-m", "memdir", "--root", root, *args],
                              input=text, capture_output=True, env=env).returncode
    def write(rel, text):
        note(op="try", path=rel, sha=sha(text.encode()))
        if memdir("write", rel, "--actor", name, text=text.encode()) == 0:
            note(op="ack", path=rel, sha=sha(text.encode()))
    turn = None
    def purge(rel):
        if memdir("forget", rel, "--purge", "--actor", name) != 0:
            raise SystemExit(f"purge of {rel} failed")

n = 0
purged = set()  # numbers whose file was purged: never written again
while True:
    n += 1
    rel = f"faults/{name}/{n}.md"
    roll = rng.random()
    if roll < 0.12:
        secret = f"Purge{name.replace('-', '')}X{n}Q{rng.randrange(10**6)}"
        text = f"# Secret {n}\n\nThe code is {secret}.\n"
        if turn is not None and roll < 0.06:
            rel = turn(f"the code is {secret}")
        else:
            write(rel, text)
        purged.add(n)
        note(op="try_purge", path=rel, secret=secret)
        purge(rel)
        note(op="purged", path=rel, secret=secret)
    elif turn is not None and roll < 0.3:
        turn(f"turn {n} of {name}: " + " ".join(rng.choice("abcdefgh") * 3 for _ in range(8)))
    elif roll < 0.4 and n > 2 and (k := rng.randrange(1, n)) not in purged:
        write(f"faults/{name}/{k}.md", f"# Again {n}\n\nrewritten {rng.random()}\n")  # again
    else:
        write(rel, f"# Note {n}\n\n{name} wrote note {n}: {rng.random()}\n")
"""

SOURCES = [
    ("starter.md", "# Sourdough starter\n\nFeed the starter daily with flour and water.\n"),
    ("crust.md", "# Bread crust\n\nA hot oven with steam gives bread a crisp crust.\n"),
    ("proof.md", "# Proofing dough\n\nProof the dough until it springs back when pressed.\n"),
]


@dataclass
class Round:
    kind: str
    acknowledged: int = 0
    present: int = 0
    lost: int = 0
    uncommitted: int = 0
    purged: int = 0
    purged_but_found: int = 0
    doctor_ok: bool = True
    fsck_ok: bool = True
    temp_files: int = 0
    reads: int = 0
    read_errors: int = 0
    rebuilds: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        bad = self.lost or self.uncommitted or self.purged_but_found or self.temp_files
        bad = bad or self.read_errors
        return not bad and self.doctor_ok and self.fsck_ok and not self.problems


class Ledger:
    """What every writer tried, had acknowledged and purged (from their append-only logs)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._mutex = threading.Lock()

    def log(self, name: str) -> Path:
        return self.folder / f"{name}.log"

    def note(self, name: str, **entry: Any) -> None:
        with self._mutex, self.log(name).open("a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def entries(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in sorted(self.folder.glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # the torn last line of a killed writer
        return out


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git(root: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=check
    )


def env_for(root: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, MEMDIR_EMBEDDINGS_ENABLED="false", **extra)
    env.pop("MEMDIR_ROOT", None)
    return env


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a process started in its own session, with every child it started."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    # Its children (a `memdir write`, a git) may still be dying: a dying process still holds
    # its locks, and the check must find the store as the dead ones left it.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)


def check(root: Path, ledger: Ledger, result: Round) -> None:
    """Reopen the store (recovery runs) and check it against every log."""
    from memdir.service import Memory

    with Memory.open(root) as mem:
        report = mem.doctor()
        result.doctor_ok = report.ok
        if not report.ok:
            result.problems.append(f"doctor: {json.dumps(report.to_dict())[:400]}")
    later: dict[str, set[str]] = {}  # path -> shas tried after its last ack
    acked: dict[str, str] = {}
    tried_purge: set[str] = set()
    purged: dict[str, str] = {}
    for entry in ledger.entries():
        op, rel = entry["op"], entry["path"]
        if op == "try":
            later.setdefault(rel, set()).add(entry["sha"])
        elif op == "ack":
            acked[rel] = entry["sha"]
            later[rel] = set()
        elif op == "try_purge":
            tried_purge.add(rel)
        elif op == "purged":
            purged[entry["secret"]] = rel
    status = git(root, "status", "--porcelain", "-z", "--untracked-files=all").stdout
    dirty = {item[3:] for item in status.split("\0") if len(item) > 3}
    gone = set(purged.values())
    gone |= {rel[:-3] + WORKLOG_SUFFIX for rel in gone}  # a purged turn's work log goes too
    tried_purge |= {rel[:-3] + WORKLOG_SUFFIX for rel in tried_purge}
    for rel, want in acked.items():
        if rel in gone:
            continue
        result.acknowledged += 1
        try:
            have: str | None = sha((root / rel).read_bytes())
        except FileNotFoundError:
            have = None
        if have == want or have in later.get(rel, set()):
            result.present += 1
        elif have is None and rel in tried_purge:
            result.present += 1  # its purge was under way: gone is allowed
        else:
            result.lost += 1
            result.problems.append(f"lost: {rel}")
        if rel in dirty and have == want:
            result.uncommitted += 1
            result.problems.append(f"uncommitted: {rel}")
    for rel in set(purged.values()):
        if (root / rel).exists():
            result.problems.append(f"purged but on disk: {rel}")
        if rel in dirty:
            result.uncommitted += 1  # its deletion is not committed
    result.purged = len(purged)
    result.purged_but_found = len(holding(root, list(purged)))
    wait_for_gc(root)
    fsck = git(root, "fsck", "--no-progress", "--no-dangling")
    result.fsck_ok = fsck.returncode == 0
    if not result.fsck_ok:
        result.problems.append(f"git fsck: {fsck.stderr.strip()[:400]}")
    if (root / ".git" / "index.lock").exists():
        result.problems.append(".git/index.lock left behind")
    temps = temp_files(root)
    result.temp_files = len(temps)
    result.problems += [f"temp file left: {t}" for t in temps]


def wait_for_gc(root: Path, seconds: float = 120.0) -> None:
    """Wait for a ``git gc --auto`` that a commit started in the background (it repacks, and
    an fsck beside it sees packs vanish)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            pid = int((root / ".git" / "gc.pid").read_text().split()[0])
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, IndexError, ProcessLookupError):
            return
        time.sleep(0.1)


def holding(root: Path, secrets: list[str]) -> list[str]:
    """The purged texts some file under ``root`` (``.git/`` aside) still holds."""
    wanted = {s: (s.encode(), s.lower().encode()) for s in secrets}
    found: set[str] = set()
    for folder, dirs, names in os.walk(root):
        if Path(folder) == root:
            dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            try:
                data = (Path(folder) / name).read_bytes()
            except OSError:
                continue
            found.update(s for s, forms in wanted.items() if any(f in data for f in forms))
    return sorted(found)


def temp_files(root: Path) -> list[str]:
    """Staged temp files left in the store (dead writers' leftovers)."""
    out: list[str] = []
    for folder, dirs, names in os.walk(root):
        if Path(folder) == root:
            dirs[:] = [d for d in dirs if d not in (".git", ".memdir")]
        out += [
            os.path.relpath(os.path.join(folder, n), root)
            for n in names
            if n.startswith(".") and n.endswith(".tmp")
        ]
    return out


# -- rounds ------------------------------------------------------------------------------


def writers_round(
    root: Path, ledger: Ledger, n: int, args: argparse.Namespace, result: Round
) -> list[str]:
    """N writer processes (API and CLI), each SIGKILLed at its own random moment."""
    rng = random.Random(args.seed + n)
    procs: list[tuple[float, subprocess.Popen[bytes]]] = []
    started = time.monotonic()
    for k in range(args.writers):
        proc = start_writer(root, ledger, f"r{n}", k, rng)
        procs.append((rng.uniform(args.seconds * 0.3, args.seconds), proc))
    problems: list[str] = []
    for at, proc in sorted(procs, key=lambda p: p[0]):
        time.sleep(max(0.0, started + at - time.monotonic()))
        problems += kill_writer(proc)
    return problems


def start_writer(
    root: Path, ledger: Ledger, prefix: str, k: int, rng: random.Random
) -> subprocess.Popen[bytes]:
    """Writer ``k`` (even: through the API, odd: the CLI), in a session of its own."""
    mode = "api" if k % 2 == 0 else "cli"
    name = f"{prefix}-{mode}{k}"
    batch = f"{rng.choice([0.0, 0.05, 0.3, 2.0]):g}"  # commit windows a kill lands in
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(ledger.log(name)), mode, name,
         str(rng.randrange(10**9))],
        env=env_for(root, MEMDIR_STORE_GIT_BATCH_SECONDS=batch),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip


def kill_writer(proc: subprocess.Popen[bytes]) -> list[str]:
    """SIGKILL a writer; the problem, when it had stopped on its own (a write failed)."""
    problem = None if proc.poll() is None else f"a writer exited with {proc.returncode}"
    kill_group(proc)
    return [f"{problem} before its kill"] if problem else []


def serve(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``memdir serve`` on the store, answering (in a session of its own); it and its URL."""
    port = reindex_load.free_port()
    proc = reindex_load.start_server(root, port, root.parent / "serve.log", env_for(root))
    url = f"http://127.0.0.1:{port}"
    try:
        httpx.get(f"{url}/v1/ls", timeout=60)  # the first answer waits until the API is loaded
    except httpx.HTTPError:
        kill_group(proc)
        raise
    return proc, url


def server_round(
    root: Path, ledger: Ledger, n: int, args: argparse.Namespace, result: Round
) -> list[str]:
    """``memdir serve`` under C clients, SIGKILLed at a random moment."""
    rng = random.Random(args.seed * 7 + n)
    proc, url = serve(root)
    stop = threading.Event()
    refused: list[str] = []  # answers other than success while the server was up

    def client(k: int) -> None:
        name = f"s{n}-c{k}"
        crng = random.Random(rng.randrange(10**9))
        with httpx.Client(base_url=url, timeout=30) as http:
            i = 0
            while not stop.is_set():
                i += 1
                try:
                    one_request(http, ledger, name, i, crng)
                except httpx.HTTPError:
                    if stop.is_set() or proc.poll() is not None:
                        return
                    time.sleep(0.05)
                except RuntimeError as exc:
                    if not stop.is_set():
                        refused.append(str(exc)[:200])

    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
    for t in threads:
        t.start()
    time.sleep(rng.uniform(args.seconds * 0.3, args.seconds))
    kill_group(proc)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    return [f"server answered: {text}" for text in refused[:5]]


def one_request(http: httpx.Client, ledger: Ledger, name: str, i: int, rng: random.Random) -> None:
    roll = rng.random()
    if roll < 0.25:
        text = f"turn {i} of {name} " + " ".join(rng.choice("pqrstu") * 3 for _ in range(6))
        made = http.post("/v1/turns", json={"thread": name, "input": text, "output": text})
        if made.status_code != 201:
            raise RuntimeError(f"{made.status_code} {made.text}")
        rel = made.json()["path"]
        got = http.get(f"/v1/files/{rel}")
        if got.status_code == 200:
            ledger.note(name, op="ack", path=rel, sha=sha(got.json()["content"].encode()))
        return
    rel = f"faults/{name}/{i}.md"
    secret = f"Purge{name.replace('-', '')}X{i}Q{rng.randrange(10**6)}" if roll < 0.35 else ""
    text = (
        f"# {name} {i}\n\nThe code is {secret}.\n"
        if secret
        else f"# {name} {i}\n\n{rng.random()}\n"
    )
    ledger.note(name, op="try", path=rel, sha=sha(text.encode()))
    put = http.put(f"/v1/files/{rel}", json={"content": text}, headers={"X-Actor": name})
    if put.status_code not in (200, 201):
        raise RuntimeError(f"{put.status_code} {put.text}")
    ledger.note(name, op="ack", path=rel, sha=put.json()["hash"])
    if secret:
        ledger.note(name, op="try_purge", path=rel, secret=secret)
        gone = http.post("/v1/forget", json={"path": rel, "purge": True})
        if gone.status_code != 200:
            raise RuntimeError(f"{gone.status_code} {gone.text}")
        ledger.note(name, op="purged", path=rel, secret=secret)


def consolidate_round(
    root: Path, ledger: Ledger, n: int, args: argparse.Namespace, result: Round
) -> list[str]:
    """Fresh inbox sources, then ``memdir consolidate`` SIGKILLed mid-run."""
    from memdir.service import Memory

    rng = random.Random(args.seed * 13 + n)
    with Memory.open(root) as mem:
        if not (root / "wiki" / "kitchen").exists():
            mem.bundle_add("kitchen", "baking bread, sourdough starter, flour, oven, dough")
        mem.ingest([(f"r{n}-{name}", text + f"\nRound {n}.\n") for name, text in SOURCES])
    proc = subprocess.Popen(
        [sys.executable, "-m", "memdir", "--root", str(root), "consolidate"],
        env=env_for(root),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(rng.uniform(0.2, 1.5))
    kill_group(proc)
    return []


def git_lock_round(
    root: Path, ledger: Ledger, n: int, args: argparse.Namespace, result: Round
) -> list[str]:
    """What a git killed in ``git add`` leaves (an old index.lock), then CLI writes."""
    lock = root / ".git" / "index.lock"
    lock.write_bytes(b"DIRC")
    then = time.time() - 30
    os.utime(lock, (then, then))
    name = f"g{n}"
    for i in range(3):
        rel = f"faults/{name}/{i}.md"
        text = f"# After a killed git {i}\n"
        ledger.note(name, op="try", path=rel, sha=sha(text.encode()))
        done = subprocess.run(
            [sys.executable, "-m", "memdir", "--root", str(root), "write", rel],
            input=text.encode(),
            capture_output=True,
            env=env_for(root),
            check=False,
        )
        if done.returncode != 0:
            return [f"a write after a killed git failed: {done.stderr.decode()[-300:]}"]
        ledger.note(name, op="ack", path=rel, sha=sha(text.encode()))
    return []


def reader_notes(root: Path, ledger: Ledger, docs: int) -> list[str]:
    """The notes under ``notes/`` the reindex rounds search for, written (and acknowledged)
    once; their paths, sorted. Each holds ``token<n> alone``, a word no other file holds."""
    from memdir.service import Memory

    paths = [reindex_load.note_path(k) for k in range(docs)]
    if (root / paths[-1]).exists():
        return paths
    rng = random.Random(7)
    batched = {"store": {"git_batch_seconds": 0.3}}  # one commit per batch, not per note
    with Memory.open(root, overrides=batched) as mem:
        for k, rel in enumerate(paths):
            text = reindex_load.note_text(k, rng)
            ledger.note("notes", op="try", path=rel, sha=sha(text.encode()))
            done = mem.write(rel, text, actor="notes")
            ledger.note("notes", op="ack", path=rel, sha=done.hash)
    return paths


def generation(root: Path) -> int:
    """The index's generation, which a rebuild moves on when it commits."""
    import sqlite3

    db = root / ".memdir" / "index.db"
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    return int(row[0]) if row else 0


def reindex_kill_round(
    root: Path, ledger: Ledger, n: int, args: argparse.Namespace, result: Round
) -> list[str]:
    """``memdir reindex --full`` SIGKILLed inside its rebuild transaction, then searches.

    With ``--reindex-writers``, that many writers write, record turns and purge meanwhile
    (the rebuild holds the index's write lock: their writes wait for it or for its kill).
    """
    from memdir.service import Memory

    rng = random.Random(args.seed * 17 + n)
    paths = reader_notes(root, ledger, args.reindex_docs)
    with Memory.open(root) as mem:
        took = mem.reindex(full=True).seconds  # the rebuild the kill must land inside
    writers = [start_writer(root, ledger, f"k{n}", k, rng) for k in range(args.reindex_writers)]
    try:
        if writers:
            time.sleep(args.seconds / 2)  # until they write
        landed = kill_rebuild(root, took, rng, exact=not writers)
        if writers:
            time.sleep(rng.uniform(0, args.seconds / 2))  # writes that waited for the rebuild
    finally:
        problems = [p for w in writers for p in kill_writer(w)]
    if not landed:
        problems.append(f"no kill landed inside a {took:.3f} s rebuild")
    with Memory.open(root) as mem:
        for k in sorted(rng.sample(range(len(paths)), min(len(paths), 200))):
            rel = paths[k]
            got = [hit.path for hit in mem.search(f"token{k}", mode="bm25")]
            if got != [rel]:
                problems.append(f"search token{k}: {got[:3]}")
    return problems[:20]


def kill_rebuild(root: Path, took: float, rng: random.Random, *, exact: bool) -> bool:
    """Start ``memdir reindex --full`` and SIGKILL it inside its rebuild (a rebuild takes
    about ``took`` seconds); True once a kill landed there, within five tries.

    Inside: the rebuild lock is held (it is let go right after the commit). With ``exact``
    (nobody else writes) the index's generation must not have moved too: only the rebuild's
    commit moves it.
    """
    from memdir.files import locks

    lock = root / ".memdir" / "rebuild.lock"
    for attempt in range(5):  # a kill that came after the commit tries again, sooner
        before = generation(root)
        proc = subprocess.Popen(
            [sys.executable, "-m", "memdir", "--root", str(root), "reindex", "--full"],
            env=env_for(root),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while not locks.held_elsewhere(lock) and proc.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.001)
        time.sleep(rng.uniform(0.05, 0.7) * took / (attempt + 1))
        inside = locks.held_elsewhere(lock)
        kill_group(proc)
        inside = inside and (not exact or generation(root) == before)
        if proc.returncode == -signal.SIGKILL and inside:
            return True
    return False


def reindex_reads_round(
    root: Path, ledger: Ledger, n: int, args: argparse.Namespace, result: Round
) -> list[str]:
    """Reader threads on a server, every answer checked, while full rebuilds loop."""
    paths = reader_notes(root, ledger, args.reindex_docs)
    proc, url = serve(root)
    try:
        out = reindex_load.run_round(
            url, paths, seconds=args.seconds, readers=args.readers, hybrid=False
        )
        alive = proc.poll() is None
    finally:
        kill_group(proc)  # the round is about the rebuilds, not the server's stop
    result.reads, result.read_errors, result.rebuilds = out.requests, len(out.errors), out.rebuilds
    problems = [f"reader: {e}" for e in out.errors[:5]]
    if not out.rebuilds:
        problems.append("no rebuild finished")
    return problems + ([] if alive else ["the server died under the rebuilds"])


RoundFn = Callable[[Path, Ledger, int, argparse.Namespace, Round], list[str]]
ROUNDS: dict[str, RoundFn] = {
    "writers": writers_round,
    "server": server_round,
    "consolidate": consolidate_round,
    "git-lock": git_lock_round,
    "reindex-kill": reindex_kill_round,
    "reindex-reads": reindex_reads_round,
}


def plan(args: argparse.Namespace) -> list[str]:
    """The order of rounds: the writer rounds, with the others spread among them."""
    extra = ["server"] * args.server_kills + ["consolidate"] * args.consolidate_kills
    extra += ["git-lock"] * args.git_locks + ["reindex-kill"] * args.reindex_kills
    extra += ["reindex-reads"] * args.reindex_reads
    kinds = ["writers"] * args.rounds
    every = max(1, args.rounds // (len(extra) + 1)) if extra else 0
    out: list[str] = []
    for k, kind in enumerate(kinds):
        out.append(kind)
        if extra and (k + 1) % every == 0:
            out.append(extra.pop(0))
    return out + extra


def run(args: argparse.Namespace) -> dict[str, Any]:
    from memdir.files.store import Store

    base = Path(tempfile.mkdtemp(prefix="memdir-faults-")) if args.root is None else args.root
    root = Store.init(base / "store")
    ledger = Ledger(base / "acks")
    rounds: list[Round] = []
    for n, kind in enumerate(plan(args)):
        started = time.perf_counter()
        result = Round(kind)
        result.problems += ROUNDS[kind](root, ledger, n, args, result)
        check(root, ledger, result)
        result.seconds = round(time.perf_counter() - started, 2)
        rounds.append(result)
        if not args.json:
            print(line(f"{n:>3} {kind:<13}", result), flush=True)
    # Each check covers every write acknowledged so far: the last one is the total.
    last = rounds[-1] if rounds else Round("none")
    total = {
        "rounds": len(rounds),
        "acknowledged": last.acknowledged,
        "present": last.present,
        "lost": last.lost,
        "uncommitted": last.uncommitted,
        "purged": last.purged,
        "purged_but_found": last.purged_but_found,
        "reads": sum(r.reads for r in rounds),
        "read_errors": sum(r.read_errors for r in rounds),
        "rebuilds": sum(r.rebuilds for r in rounds),
        "failed_rounds": sum(not r.ok for r in rounds),
    }
    return {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "store": str(root),
        "total": total,
        "rounds": [asdict(r) | {"ok": r.ok} for r in rounds],
    }


def line(label: str, r: Round) -> str:
    return (
        f"{label} acknowledged {r.acknowledged:>5}  present {r.present:>5}  lost {r.lost}  "
        f"uncommitted {r.uncommitted}  purged {r.purged:>3}  purged-but-found "
        f"{r.purged_but_found}  doctor {'ok' if r.doctor_ok else 'FAIL'}  fsck "
        f"{'ok' if r.fsck_ok else 'FAIL'}"
        + (f"  reads {r.reads} errors {r.read_errors} rebuilds {r.rebuilds}" if r.reads else "")
        + f"  {r.seconds:.1f}s"
        + ("" if r.ok else "  PROBLEMS: " + "; ".join(r.problems[:5]))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="Writer kill rounds.")
    parser.add_argument("--writers", type=int, default=8, help="Writer processes per round.")
    parser.add_argument("--server-kills", type=int, default=3, help="Server kill rounds.")
    parser.add_argument("--clients", type=int, default=16, help="HTTP clients of the server.")
    parser.add_argument("--seconds", type=float, default=5.0, help="Longest a round runs.")
    parser.add_argument(
        "--consolidate-kills", type=int, default=2, help="Rounds of a consolidate killed midway."
    )
    parser.add_argument("--git-locks", type=int, default=1, help="Stale git lock rounds.")
    parser.add_argument(
        "--reindex-kills", type=int, default=1, help="Rounds of a full reindex killed midway."
    )
    parser.add_argument(
        "--reindex-reads", type=int, default=1, help="Rounds of full reindexes under readers."
    )
    parser.add_argument(
        "--reindex-writers", type=int, default=2, help="Writers while a reindex is killed."
    )
    parser.add_argument("--readers", type=int, default=4, help="Reader threads of those.")
    parser.add_argument(
        "--reindex-docs", type=int, default=1000, help="Notes the reindex rounds search for."
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--root", type=Path, help="Work folder (default: a new temp folder).")
    parser.add_argument("--json", action="store_true", help="Print one JSON object only.")
    args = parser.parse_args()
    out = run(args)
    t = out["total"]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(
            f"total: {t['rounds']} rounds  acknowledged {t['acknowledged']}  present "
            f"{t['present']}  lost {t['lost']}  uncommitted {t['uncommitted']}  purged "
            f"{t['purged']}  purged-but-found {t['purged_but_found']}  reads {t['reads']}  "
            f"read errors {t['read_errors']}  rebuilds {t['rebuilds']}  failed rounds "
            f"{t['failed_rounds']}"
        )
    sys.exit(1 if t["failed_rounds"] else 0)


if __name__ == "__main__":
    main()
