"""Fuzz a real `memdir serve` against its own OpenAPI document with schemathesis.

Starts `memdir serve` (MCP mounted) on a free loopback port over a temporary store with
an admin token and a little content, generates cases for every operation of
/openapi.json, sends each with the token, and prints how many cases ran, the statuses
they got and every server error (a 5xx). Exit status 1 when there was a server error.

Run: .venv/bin/python bench/schemathesis_run.py [--examples 25] [--seed 1]
(schemathesis comes with the dev extra: pip install -e '.[dev]')
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

MODES = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
"""Valid cases, and cases that break the schema on purpose (each must be a 4xx, never 5xx)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _memdir(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "memdir", *args], capture_output=True, env=env, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"memdir {' '.join(args)} failed: {done.stderr.decode()}")
    return done.stdout.decode()


def _seed_store(root: Path, env: dict[str, str]) -> str:
    """A store with a file, an episode, an inbox source and a bundle; returns an admin token."""
    _memdir("init", str(root), env=env)
    run = ["--root", str(root)]
    _memdir(*run, "write", "wiki/ops/deploys.md", "--text", "# Deploys\n\nBlue switch.\n", env=env)
    episode = "---\nepisode_id: e1\n---\n# E1\n\nrolled back\n"
    _memdir(*run, "write", "episodes/e1.md", "--text", episode, env=env)
    _memdir(*run, "bundle", "add", "ops", "--scope", "deploys and rollbacks", env=env)
    created = _memdir(*run, "token", "create", "fuzz", "--scope", "admin", "--json", env=env)
    return str(json.loads(created)["token"])


@contextmanager
def _server(root: Path, env: dict[str, str]) -> Iterator[str]:
    port = _free_port()
    command = [sys.executable, "-m", "memdir", "--root", str(root), "serve", "--port", str(port)]
    # The server logs every request to stderr: into a file, since a pipe nobody reads fills
    # after a few thousand lines and then blocks the server's event loop on its next line.
    log = root.parent / "server.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=sink)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                tail = log.read_bytes()[-2000:].decode(errors="replace")
                raise SystemExit(f"the server exited: {tail}")
            try:
                httpx.get(f"{url}/v1/health", timeout=5)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not answer") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def _sendable(headers: dict[str, Any]) -> dict[str, str]:
    """Header values httpx can send (the fuzzer may produce bytes h11 refuses)."""
    out = {}
    for key, value in headers.items():
        text = str(value)
        if text == text.strip() and text.isprintable() and text.isascii():
            out[key] = text
    return out


def fuzz(
    url: str, token: str, examples: int, seed_value: int, verbose: bool = False
) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, timeout=60) as client:
        doc = client.get("/openapi.json", headers=auth).json()
        schema = schemathesis.openapi.from_dict(doc)
        statuses: collections.Counter[int] = collections.Counter()
        errors: list[str] = []
        operations: list[str] = []
        skipped: list[str] = []
        unsent: collections.Counter[str] = collections.Counter()
        for result, mode in itertools.product(schema.get_all_operations(), MODES):
            operation = result.ok()
            if mode is MODES[0]:
                operations.append(f"{operation.method.upper()} {operation.path}")

            @seed(seed_value)
            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],  # nothing raises: no shrinking
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case: schemathesis.Case) -> None:
                kwargs = case.as_transport_kwargs(base_url=url)
                if verbose:
                    print(
                        case.method,
                        case.formatted_path,
                        kwargs.get("params"),
                        kwargs.get("json"),
                        file=sys.stderr,
                    )
                try:
                    response = client.request(
                        kwargs["method"],
                        case.formatted_path,
                        params=kwargs.get("params"),
                        headers={**_sendable(kwargs.get("headers") or {}), **auth},
                        json=kwargs.get("json"),
                    )
                except (httpx.HTTPError, UnicodeError) as exc:
                    # httpx refuses to send it (a bad URL) or the server did not answer
                    unsent[type(exc).__name__] += 1
                    if isinstance(exc, httpx.TransportError):
                        errors.append(f"{case.method} {case.formatted_path}: no answer ({exc!r})")
                    return
                statuses[response.status_code] += 1
                if response.status_code >= 500:
                    errors.append(
                        f"{case.method} {case.formatted_path} params={kwargs.get('params')} "
                        f"json={json.dumps(kwargs.get('json'))[:300]} -> "
                        f"{response.status_code} {response.text[:300]}"
                    )

            try:
                check()
            except Unsatisfiable:  # nothing to break: an operation without parameters or body
                skipped.append(f"{operation.method.upper()} {operation.path} ({mode.value})")
    return {
        "operations": operations,
        "statuses": statuses,
        "errors": errors,
        "skipped": skipped,
        "unsent": unsent,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=25, help="examples per operation")
    parser.add_argument("--seed", type=int, default=1, help="hypothesis seed")
    parser.add_argument("--verbose", action="store_true", help="print each case to stderr")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "MEMDIR_ROOT"}
    env["MEMDIR_EMBEDDINGS_ENABLED"] = "false"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        token = _seed_store(root, env)
        with _server(root, env) as url:
            found = fuzz(url, token, args.examples, args.seed, args.verbose)
    statuses = found["statuses"]
    cases = sum(statuses.values())
    print(f"operations: {len(found['operations'])}")
    each = f"{args.examples} positive and {args.examples} negative examples per operation at most"
    print(f"cases run: {cases} ({each}, seed {args.seed})")
    print("statuses: " + ", ".join(f"{code}: {n}" for code, n in sorted(statuses.items())))
    if found["unsent"]:
        unsent = ", ".join(f"{kind}: {n}" for kind, n in found["unsent"].items())
        print(f"not sent or not answered: {unsent}")
    print(f"without negative cases (nothing to break): {len(found['skipped'])}")
    print(f"server errors: {len(found['errors'])}")
    for line in found["errors"][:20]:
        print("  " + line)
    print(f"took {time.perf_counter() - started:.1f}s")
    return 1 if found["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
