"""Synthetic stores for benchmarks: episodes with ids, pages with merged-from, realistic sizes.

Deterministic for a seed. Episodes are ~60% of files (300-1500 bytes), pages ~40% (1-4 KB) that
merge a few episodes each, so about 70% of episodes are covered.

Text follows a Zipf distribution over a vocabulary of English function words, the domain words
below and 20,000 made-up words, so document frequencies look like those of real prose: function
words are in every file, domain words in a few percent to half of them, most words in very few.
``--flat-vocabulary`` draws uniformly from the domain words only (every word in nearly every
file: a worst case for ranked search).
"""

from __future__ import annotations

import argparse
import itertools
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


FUNCTION_WORDS = (
    "the of and to a in is it that for was on with as be at by this had not are but from or "
    "have an they which one were all we when there can been has more if will no out so what "
    "up into then them some could"
).split()
_SYLLABLES = "ka lo mi ne ru ta vo shi den gar pel tor qui bex fan jol mur sen zif wap".split()


def vocabulary(flat: bool = False) -> tuple[list[str], list[float] | None]:
    """Words and cumulative Zipf weights (None: uniform over the domain words)."""
    if flat:
        return list(WORDS), None
    made = ("".join(parts) for n in (2, 3, 4) for parts in itertools.product(_SYLLABLES, repeat=n))
    words = list(FUNCTION_WORDS)
    domain = iter(WORDS)
    for rank, word in enumerate(itertools.islice(made, 20_000)):
        if rank % 4 == 0:  # domain words spread over ranks ~50 to ~400
            words.append(next(domain, word))
        words.append(word)
    cum: list[float] = []
    total = 0.0
    for rank in range(1, len(words) + 1):
        total += 1.0 / rank**1.05
        cum.append(total)
    return words, cum


_VOCAB: dict[bool, tuple[list[str], list[float] | None]] = {}


def sentence(rng: random.Random, n: int, flat: bool = False) -> str:
    if flat not in _VOCAB:
        _VOCAB[flat] = vocabulary(flat)
    words, cum = _VOCAB[flat]
    picked = rng.choices(words, k=n) if cum is None else rng.choices(words, cum_weights=cum, k=n)
    return " ".join(picked).capitalize() + "."


def paragraph(rng: random.Random, size: int, flat: bool = False) -> str:
    out: list[str] = []
    total = 0
    while total < size:
        s = sentence(rng, rng.randint(6, 18), flat)
        out.append(s)
        total += len(s) + 1
    return " ".join(out)


def generate(root: Path, count: int, seed: int = 7, *, flat: bool = False) -> Path:
    """Write ``count`` markdown files under ``root`` (a memdir store or a plain folder)."""
    rng = random.Random(seed)
    n_episodes = int(count * 0.6)
    n_pages = count - n_episodes
    for i in range(n_episodes):
        day = 1 + i % 28
        folder = root / "episodes" / f"2026-{1 + (i // 28) % 12:02d}-{day:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        body = paragraph(rng, rng.randint(300, 1500), flat)
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
        body = "\n\n".join(paragraph(rng, rng.randint(300, 1000), flat) for _ in range(3))
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
    parser.add_argument("--flat-vocabulary", action="store_true", help="uniform domain words")
    args = parser.parse_args()
    started = time.perf_counter()
    generate(args.root, args.count, args.seed, flat=args.flat_vocabulary)
    print(f"wrote {args.count} files in {time.perf_counter() - started:.1f}s")


if __name__ == "__main__":
    main()
