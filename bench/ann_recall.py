"""How near the Postgres engine's approximate vector search is to the exact scan, on real text.

The synthetic store of ``bench/scale.py`` is embedded by word hashes, whose nearest
neighbours barely stand out of the noise; this bench measures the approximate index on
vectors as the default embedding model makes them, of real English prose: the paragraphs
of the docstrings of the Python modules on this machine (the standard library and the
installed packages, or the folders given), each written as a document. A part of them,
every ``--every``-th paragraph, is kept out of the store, and the first sentence of each is
a query. For each number of candidates it prints the approximate top 10's recall against
the exact scan's (ties counted as hits) and the search's p50 / p95.

    python bench/ann_recall.py [--docs 30000] [--queries 200] [--keep DIR] [--dsn DSN]

``--keep`` writes the store (and its vectors) once and reuses it.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from memdir.index.pgrows import VECTORS
from memdir.service import Memory
from scale import vector_recall


def paragraphs(folders: Sequence[Path]) -> list[str]:
    """The distinct prose paragraphs (120 characters or more, mostly letters) of the
    docstrings of every Python file under the folders, in a fixed order."""
    seen: set[str] = set()
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            for text in _docstrings(path):
                for para in re.split(r"\n\s*\n", text):
                    flat = " ".join(para.split())
                    letters = sum(c.isalpha() or c == " " for c in flat)
                    printable = flat.isprintable()
                    if printable and len(flat) >= 120 and letters >= 0.9 * len(flat):
                        seen.add(flat)
    return sorted(seen)


def _docstrings(path: Path) -> Iterator[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def first_sentence(text: str) -> str:
    return re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0][:200]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=30_000, help="documents in the store")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--every", type=int, default=50, help="every Nth paragraph is a query")
    parser.add_argument("--from", dest="folders", type=Path, action="append", default=[])
    parser.add_argument("--candidates", default="50,100,200,400,1000")
    parser.add_argument("--keep", type=Path, help="keep (or reuse) the store here")
    parser.add_argument("--dsn", default="")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="memdir-ann-")) / "store"
    queries_file = root.parent / f"{root.name}.queries.json"
    if not root.exists():
        folders = args.folders or [Path(p) for p in sys.path if p.endswith("python3.11")] + [
            Path(p) for p in sys.path if p.endswith("site-packages")
        ]
        t0 = time.perf_counter()
        paras = paragraphs(folders)
        held = paras[:: args.every][: args.queries]
        kept = [p for i, p in enumerate(paras) if i % args.every][: args.docs]
        print(f"{len(paras)} paragraphs in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        Memory.init(root).close()
        with Memory.open(root, overrides={"store": {"git_commit": False}}) as mem:
            for i, text in enumerate(kept):
                mem.write(f"notes/p{i:06d}.md", f"# Paragraph {i}\n\n{text}\n")
        queries_file.write_text(json.dumps([first_sentence(p) for p in held]), encoding="utf-8")
    queries: list[str] = json.loads(queries_file.read_text(encoding="utf-8"))
    server = None
    dsn = args.dsn
    if not dsn:
        from memdir.index import pglocal

        server = pglocal.start()
        dsn = server.dsn
    out: dict[str, Any] = {"queries": len(queries)}
    index = {"engine": "postgres", "dsn": dsn, "store": "ann", "approximate_from": 1}
    try:
        with Memory.open(root, overrides={"store": {"git_commit": False}}) as mem:
            t0 = time.perf_counter()
            mem.embed()
            out["embed_s"] = round(time.perf_counter() - t0, 1)
        with Memory.open(root, overrides={"store": {"git_commit": False}, "index": index}) as mem:
            t0 = time.perf_counter()
            mem.reindex(full=True)
            mem.search("warm", mode="vector", limit=1)
            out["build_s"] = round(time.perf_counter() - t0, 1)
            pg = mem.retrieval.pg
            assert pg is not None
            with pg._session() as conn:
                row = conn.execute(
                    "SELECT n FROM memdir_counts WHERE store = 'ann' AND kind = %s", (VECTORS,)
                ).fetchone()
            out["vectors"] = int(row[0]) if row else 0
            vectors = [mem.retrieval._query_vector(q) for q in queries]
            counts = [int(c) for c in args.candidates.split(",") if c]
            out["recall_at_10"] = vector_recall(pg, vectors, counts)
            out["vector_scans"] = dict(pg.vector_scans)
    finally:
        if server is not None:
            server.remove()
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
