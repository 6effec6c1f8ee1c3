"""Synthetic stores for benchmarks: episodes with ids, pages with merged-from, realistic sizes.

Deterministic for a seed. Episodes are ~60% of files (300-1500 bytes), pages ~40% (1-4 KB) that
merge a few episodes each, so about 70% of episodes are covered.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

WORDS = (
    "deploy rollback canary service latency cache index query agent memory turn session "
    "error retry timeout budget token snapshot lesson article bundle topic source user thread "
    "config schema migration database replica backup restore alert metric trace span log "
    "release branch commit review test build pipeline artifact container cluster node pod "
    "network packet route gateway proxy certificate key rotation secret vault policy audit "
    "customer invoice billing plan refund ticket escalation incident postmortem runbook oncall"
).split()


def sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(WORDS) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def paragraph(rng: random.Random, size: int) -> str:
    out: list[str] = []
    total = 0
    while total < size:
        s = sentence(rng, rng.randint(6, 18))
        out.append(s)
        total += len(s) + 1
    return " ".join(out)


def generate(root: Path, count: int, seed: int = 7) -> Path:
    """Write ``count`` markdown files under ``root`` (a memdir store or a plain folder)."""
    rng = random.Random(seed)
    n_episodes = int(count * 0.6)
    n_pages = count - n_episodes
    for i in range(n_episodes):
        day = 1 + i % 28
        folder = root / "episodes" / f"2026-{1 + (i // 28) % 12:02d}-{day:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        body = paragraph(rng, rng.randint(300, 1500))
        (folder / f"ep-{i:06d}.md").write_text(
            f"---\nepisode_id: ep-{i:06d}\nmemory_kind: episodic\ntype: run\n"
            f"created: 2026-01-{day:02d}T10:00:00Z\n---\n# Run {i}\n\n{body}\n",
            encoding="utf-8",
        )
    for j in range(n_pages):
        folder = root / "wiki" / f"bundle{j % 5}" / f"topic{j % 97}"
        folder.mkdir(parents=True, exist_ok=True)
        merged = "".join(
            f"  - type: run\n    id: ep-{rng.randrange(n_episodes):06d}\n" for _ in range(3)
        )
        body = "\n\n".join(paragraph(rng, rng.randint(300, 1000)) for _ in range(3))
        links = " ".join(f"[[page-{rng.randrange(n_pages):06d}]]" for _ in range(3))
        (folder / f"page-{j:06d}.md").write_text(
            f"---\ntitle: Page {j}\ntype: concept\nmemory_kind: semantic\n"
            f"merged-from:\n{merged}---\n# Page {j}\n\n{body}\n\nSee {links}.\n",
            encoding="utf-8",
        )
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", type=Path)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    started = time.perf_counter()
    generate(args.root, args.count, args.seed)
    print(f"wrote {args.count} files in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
