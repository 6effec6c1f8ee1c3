"""Whole-process latency of `memdir hook claude-code EVENT` on a store of many turns, and
the rate of `memdir import claude-code`.

    python bench/agent_hooks.py [--turns 10000] [--runs 40] [--watch] [--keep DIR]
        [--baseline SRC] [--instructions]
    python bench/agent_hooks.py --import-turns 10000 [--keep DIR]

Builds a store of ``--turns`` turn records (bench/turns.py's ``build_store``: rendered
straight to disk, then indexed once), then plays one Claude Code session against it: for each
of ``--runs`` prompts it appends the prompt to a transcript shaped like Claude Code's, runs
`python -m memdir hook claude-code UserPromptSubmit` with the event on stdin, appends a tool
call, its result and the answer, and runs `... Stop`; every few prompts a `SessionStart`
(resume). Each time is the whole process (start, imports, opening the store, the answer, git,
exit), as the agent waits for it; a `PostToolUse` follows each tool call. Prints, per event,
p50/p95/max of the wall time and p50/p95 of the CPU time the process used (user + system: what
the code costs, which a busy neighbour on the machine does not inflate), the target and whether
it is met, the load average, the pack's size in characters and tokens, and checks every Stop
recorded its turn once. ``--instructions`` also counts, with valgrind, the instructions of
one ``SessionStart`` and one ``UserPromptSubmit`` process (and the baseline's): a figure that
does not move with the host's speed or load. No daemon runs; with ``--watch`` a
`memdir watch` runs beside the session (the hooks then ask it instead of statting every
file). memdir's modules are compiled
to bytecode first, as installing the package does.

``--import-turns N`` writes N turns as Claude Code transcripts (100 turns a session, one tool
call each) and times `memdir import claude-code` over them into a new store, embeddings off,
as a whole process; then again, which must add nothing.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import memdir
import turns as turn_bench  # beside this file: python puts the script's folder on sys.path
from memdir.doc.tokencount import counter
from memdir.files.store import Store
from memdir.service import Memory


class Transcript:
    """A Claude Code transcript, appended to as the agent appends to it."""

    def __init__(self, path: Path, session: str, cwd: str) -> None:
        self.path, self.session, self.cwd = path, session, cwd
        self.clock = datetime.now(UTC)
        self.parent: str | None = None

    def add(self, kind: str, **fields: Any) -> str:
        self.clock += timedelta(milliseconds=700)
        ident = str(uuid.uuid4())
        record = {
            "parentUuid": self.parent,
            "isSidechain": False,
            "cwd": self.cwd,
            "sessionId": self.session,
            "version": "2.1.332",
            "type": kind,
            "uuid": ident,
            "timestamp": self.clock.isoformat().replace("+00:00", "Z"),
            **fields,
        }
        self.parent = ident
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        return ident

    def turn_body(self, n: int) -> str:
        use = f"toolu_{n:06d}"
        self.add(
            "assistant",
            message={
                "id": f"msg_{n}a",
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": use,
                        "name": "mcp__memdir__search",
                        "input": {"query": "deploy migrations"},
                    }
                ],
            },
        )
        self.add(
            "user",
            message={
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use, "content": "[]", "is_error": False}
                ],
            },
        )
        answer = f"Run the migrations first, then make deploy ({n})."
        self.add(
            "assistant",
            message={
                "id": f"msg_{n}b",
                "role": "assistant",
                "content": [{"type": "text", "text": answer}],
            },
        )
        return answer


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


TARGETS = {"SessionStart": 150.0, "UserPromptSubmit": 150.0, "Stop": 250.0}  # p95, ms


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def hook(
    env: dict[str, str], event: str, payload: dict[str, Any], cpu: dict[str, list[float]]
) -> tuple[float, bytes]:
    before = _children_cpu()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "memdir", "hook", "claude-code", event],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=env,
        check=False,
        timeout=60,
    )
    took = (time.perf_counter() - started) * 1000
    cpu.setdefault(event, []).append(_children_cpu() - before)
    if done.returncode != 0 or done.stderr:
        raise SystemExit(f"{event}: exit {done.returncode}: {done.stderr.decode()[:500]}")
    waited = _wait_for_walk(Path(env["MEMDIR_ROOT"]))
    if waited is not None:
        WALKS.setdefault(event, []).append(waited)
    return took, done.stdout


# How long the stat walk a hook leaves running after it answered (memdir.agents.hooks,
# walk_detached) went on after the hook's exit, per event (ms).
WALKS: dict[str, list[float]] = {}


def _wait_for_walk(root: Path) -> float | None:
    """Wait until the hook's background walk is over, as the model's answer gives it time
    to in a session (the next event comes after a round trip to the model); how long that
    took, or None when no walk was running."""
    import fcntl

    lock = root / ".memdir" / "hooks" / "walk.lock"
    if not lock.exists():
        return None
    started = time.perf_counter()
    with lock.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(handle, fcntl.LOCK_EX)
            return (time.perf_counter() - started) * 1000
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--keep", type=Path, default=None, help="Build the store here.")
    parser.add_argument("--import-turns", type=int, default=0, help="Time an import instead.")
    parser.add_argument("--watch", action="store_true", help="Run `memdir watch` beside it.")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="Also count the instructions of one SessionStart and one UserPromptSubmit "
        "process (and the baseline's) with valgrind: a figure a busy host does not move.",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="The src/ folder of other memdir code (an export of an older commit): each "
        "SessionStart, UserPromptSubmit and PostToolUse also runs with it, in alternating "
        "order, and must answer the same.",
    )
    args = parser.parse_args()
    bench = bench_import if args.import_turns else run
    if args.keep is not None:
        return bench(args, args.keep)
    with tempfile.TemporaryDirectory(prefix="memdir-hooks-") as scratch:
        return bench(args, Path(scratch))


def bench_import(args: argparse.Namespace, folder: Path) -> int:
    """Time `memdir import claude-code` over ``--import-turns`` turns of transcripts."""
    home, root = folder / "home", folder / "store"
    Store.init(root)
    for first in range(0, args.import_turns, 100):
        session = str(uuid.uuid4())
        tdir = home / ".claude" / "projects" / "-work"
        tdir.mkdir(parents=True, exist_ok=True)
        log = Transcript(tdir / f"{session}.jsonl", session, "/work")
        for n in range(first, min(first + 100, args.import_turns)):
            log.add("user", message={"role": "user", "content": f"deploy question {n}?"})
            log.turn_body(n)
    env = {**os.environ, "HOME": str(home), "MEMDIR_EMBEDDINGS_ENABLED": "false"}
    for attempt in ("first", "again"):
        started = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "memdir",
                "--root",
                str(root),
                "import",
                "claude-code",
                "--json",
            ],
            capture_output=True,
            env=env,
            check=True,
            timeout=3600,
        )
        took = time.perf_counter() - started
        added = json.loads(done.stdout)["turns_added"]
        print(
            f"import {attempt}: {added} turns added in {took:.1f} s "
            f"({args.import_turns / took:.0f} turns/s read, {added / took:.0f} added/s)"
        )
    return 0


def run(args: argparse.Namespace, folder: Path) -> int:
    """Build the store in ``folder``, play the session, print the figures."""
    root = folder / "store"
    started = time.perf_counter()
    Store.init(root)
    turn_bench.build_store(root, args.turns)
    with Memory.open(root) as mem:
        mem.sync(force=True)
        count = counter(mem.settings.turns.token_counter)
    print(f"store: {args.turns} turns in {time.perf_counter() - started:.1f} s")

    compileall.compile_dir(Path(memdir.__file__).parent, quiet=1)
    if args.baseline is not None:
        compileall.compile_dir(args.baseline / "memdir", quiet=1)
    watcher = None
    if args.watch:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "memdir", "--root", str(root), "watch", "--quiet"],
            stdin=subprocess.DEVNULL,
        )
        _wait_for_watcher(root)
    try:
        return _session(args, folder, root, count)
    finally:
        if watcher is not None:
            watcher.terminate()
            watcher.wait(timeout=30)


def _wait_for_watcher(root: Path) -> None:
    from memdir.index import watch

    deadline = time.monotonic() + 60
    while not watch.confirm(root):
        if time.monotonic() > deadline:
            raise SystemExit("memdir watch did not start")
        time.sleep(0.1)


def _session(args: argparse.Namespace, folder: Path, root: Path, count: Any) -> int:
    home = folder / "home"
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    session = str(uuid.uuid4())
    tdir = home / ".claude" / "projects" / str(work).replace("/", "-")
    tdir.mkdir(parents=True, exist_ok=True)
    log = Transcript(tdir / f"{session}.jsonl", session, str(work))
    env = {**os.environ, "HOME": str(home), "MEMDIR_ROOT": str(root), "MEMDIR_USER": "u1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    base = {"session_id": session, "transcript_path": str(log.path), "cwd": str(work)}
    times: dict[str, list[float]] = {
        "SessionStart": [],
        "UserPromptSubmit": [],
        "PostToolUse": [],
        "Stop": [],
    }
    cpu: dict[str, list[float]] = {}
    sizes: list[int] = []
    tokens: list[int] = []
    load = [os.getloadavg()[0]]
    calls = 0
    if args.baseline is not None:
        other = {**env, "PYTHONPATH": str(args.baseline.absolute())}

        def timed(
            env: dict[str, str], event: str, payload: dict[str, Any], cpu: dict[str, list[float]]
        ) -> tuple[float, bytes]:
            """The call with this code and with the baseline's, in alternating order."""
            nonlocal calls
            calls += 1
            mine: tuple[float, bytes] | None = None
            for which in (0, 1) if calls % 2 else (1, 0):
                if which == 0:
                    mine = hook(env, event, payload, cpu)
                else:
                    took, out = hook(other, event, payload, cpu_base)
                    times.setdefault(f"{event} (baseline)", []).append(took)
                    theirs = out
            assert mine is not None
            if mine[1] != theirs:
                raise SystemExit(f"{event}: the baseline answered differently")
            return mine

        cpu_base: dict[str, list[float]] = {}
    hook(env, "SessionStart", {**base, "hook_event_name": "SessionStart", "source": "startup"}, {})
    for n in range(args.runs):
        prompt = f"how do we deploy the api with migrations, try {n}?"
        prompt_id = str(uuid.uuid4())
        log.add("user", message={"role": "user", "content": prompt}, promptId=prompt_id)
        took, out = (timed if args.baseline is not None else hook)(
            env,
            "UserPromptSubmit",
            {
                **base,
                "hook_event_name": "UserPromptSubmit",
                "prompt_id": prompt_id,
                "prompt": prompt,
            },
            cpu,
        )
        times["UserPromptSubmit"].append(took)
        text = json.loads(out)["hookSpecificOutput"]["additionalContext"]
        sizes.append(len(text))
        tokens.append(count.count(text + "\n"))
        answer = log.turn_body(n)
        took, _ = (timed if args.baseline is not None else hook)(
            env,
            "PostToolUse",
            {
                **base,
                "hook_event_name": "PostToolUse",
                "tool_name": "mcp__memdir__search",
                "tool_input": {"query": "deploy migrations"},
                "tool_response": [],
            },
            cpu,
        )
        times["PostToolUse"].append(took)
        took, _ = hook(
            env,
            "Stop",
            {
                **base,
                "hook_event_name": "Stop",
                "prompt_id": prompt_id,
                "stop_hook_active": False,
                "last_assistant_message": answer,
            },
            cpu,
        )
        times["Stop"].append(took)
        if n % 4 == 3:
            took, _ = (timed if args.baseline is not None else hook)(
                env,
                "SessionStart",
                {**base, "hook_event_name": "SessionStart", "source": "resume"},
                cpu,
            )
            times["SessionStart"].append(took)
        load.append(os.getloadavg()[0])
    with Memory.open(root) as mem:
        recorded = mem.thread(session, last=args.runs + 10)
    if len(recorded) != args.runs:
        raise SystemExit(f"expected {args.runs} turns of the session, found {len(recorded)}")
    mode = "memdir watch running" if args.watch else "no daemon, no watcher"
    print(f"whole process, {args.runs} prompts of one session, {mode} (ms):")
    if args.baseline is not None:
        cpu.update({f"{k} (baseline)": v for k, v in cpu_base.items()})
        print(f"baseline: {args.baseline}, answers compared: all equal")
    for event, values in times.items():
        used = cpu[event]
        target = TARGETS.get(event) if "(baseline)" not in event else None
        verdict = ""
        if target is not None:
            met = "met" if pct(values, 0.95) <= target else "NOT met"
            verdict = f"  target p95 <= {target:.0f}: {met}"
        print(
            f"  {event:28} p50 {statistics.median(values):6.1f}  p95 {pct(values, 0.95):6.1f}"
            f"  max {max(values):6.1f}  cpu p50 {statistics.median(used):6.1f}"
            f"  p95 {pct(used, 0.95):6.1f}  (n={len(values)}){verdict}"
        )
    for event, values in WALKS.items():
        print(
            f"  walk after {event:17} p50 {statistics.median(values):6.1f}"
            f"  p95 {pct(values, 0.95):6.1f}  (n={len(values)}; after the hook exited,"
            " waited for before the next event)"
        )
    print(f"load average (1 min) during the run: {min(load):.2f}-{max(load):.2f}")
    print(
        f"pack: chars p50 {statistics.median(sizes):.0f} p95 {pct(sizes, 0.95):.0f} "
        f"max {max(sizes)} (cap 9000); tokens max {max(tokens)} (budget 1500)"
    )
    print(f"turns recorded by Stop: {len(recorded)} of {args.runs}, each once")
    if args.instructions:
        reads = {
            "SessionStart": {**base, "hook_event_name": "SessionStart", "source": "resume"},
            "UserPromptSubmit": {
                **base,
                "hook_event_name": "UserPromptSubmit",
                "prompt_id": str(uuid.uuid4()),
                "prompt": "how do we deploy the api with migrations?",
            },
        }
        print("instructions per process (callgrind, the hook itself, not the walk it leaves):")
        for event, payload in reads.items():
            mine = instructions(env, event, payload, scratch=folder)
            line = f"  {event:28} {mine / 1e6:8.1f} M"
            if args.baseline is not None:
                theirs = instructions(other, event, payload, scratch=folder)
                line += f"  baseline {theirs / 1e6:8.1f} M  ratio {mine / theirs:.2f}"
            print(line)
    return 0


def instructions(
    env: dict[str, str], event: str, payload: dict[str, Any], scratch: Path, runs: int = 3
) -> float:
    """Instructions one hook process executes, counted by valgrind's callgrind (the median
    of ``runs``, after one run that warms the caches): unlike times, the same on a busy host."""
    import shutil

    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    counts: list[float] = []
    for n in range(runs + 1):
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={scratch}/callgrind.%p.out",
                sys.executable,
                "-m",
                "memdir",
                "hook",
                "claude-code",
                event,
            ],
            input=json.dumps(payload).encode(),
            capture_output=True,
            env=env,
            check=False,
            timeout=600,
        )
        _wait_for_walk(Path(env["MEMDIR_ROOT"]))
        # One line per process, the hook and the walk it forks: the hook's pid is the lower.
        found = sorted(
            (int(line.split("==")[1]), float(line.split()[-1].replace(",", "")))
            for line in done.stderr.decode().splitlines()
            if "Collected :" in line
        )
        if not found:
            raise SystemExit(f"{event}: valgrind counted nothing: {done.stderr.decode()[-500:]}")
        if n:
            counts.append(found[0][1])
    for leftover in scratch.glob("callgrind.*.out"):
        leftover.unlink()
    return statistics.median(counts)


if __name__ == "__main__":
    raise SystemExit(main())
