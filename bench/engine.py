"""Engine benchmark: consolidation time with the default writer at 250/500/1000 sources, the
snapshot size at 1k/10k/100k episodes, and the meaning router's cost per source at 100
bundles and 10k articles.

Run: .venv/bin/python bench/engine.py [--sizes 250,500,1000] [--episodes 1000,10000,100000]
    [--routing 100,10000]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

WORDS = {
    "kitchen": [
        "bread",
        "dough",
        "flour",
        "yeast",
        "starter",
        "sourdough",
        "oven",
        "crust",
        "proofing",
        "fermentation",
        "kimchi",
        "pickles",
        "brine",
        "yogurt",
        "cheese",
        "salt",
        "knead",
        "loaf",
        "rye",
        "hydration",
    ],
    "garden": [
        "soil",
        "compost",
        "seeds",
        "seedlings",
        "watering",
        "mulch",
        "pests",
        "tomatoes",
        "beans",
        "slugs",
        "rotation",
        "leaves",
        "roots",
        "beds",
        "frost",
        "sun",
        "harvest",
        "weeds",
        "manure",
    ],
    "cycling": [
        "bicycle",
        "chain",
        "tyres",
        "puncture",
        "brakes",
        "gears",
        "saddle",
        "routes",
        "commuting",
        "wheel",
        "derailleur",
        "cable",
        "pedal",
        "frame",
        "rim",
        "pump",
        "lights",
        "helmet",
        "spokes",
    ],
}
FILLER = [
    "the",
    "a",
    "with",
    "for",
    "after",
    "before",
    "during",
    "keeps",
    "makes",
    "needs",
    "turns",
    "gives",
    "every",
]


def source(rng: random.Random, bundle: str, n: int) -> str:
    words = WORDS[bundle]
    sentences = []
    for _ in range(5):
        picked = [rng.choice(words) for _ in range(6)] + [rng.choice(FILLER) for _ in range(4)]
        rng.shuffle(picked)
        sentences.append(" ".join(picked).capitalize() + ".")
    return f"# Note {n} on {rng.choice(words)} and {rng.choice(words)}\n\n" + " ".join(sentences)


def consolidate(count: int) -> tuple[float, float, int]:
    from memdir.service import Memory

    rng = random.Random(count)
    with tempfile.TemporaryDirectory() as tmp:
        mem = Memory.open(_init(Path(tmp)))
        for name, words in WORDS.items():
            mem.bundle_add(name, ", ".join(words[:10]))
        bundles = list(WORDS)
        items = [(f"s{n}.md", source(rng, bundles[n % 3], n)) for n in range(count)]
        t0 = time.perf_counter()
        mem.ingest(items)
        t1 = time.perf_counter()
        result = mem.consolidate()
        t2 = time.perf_counter()
        mem.close()
        return t1 - t0, t2 - t1, len(result["articles"])


def routing_cost(
    bundles: int, articles: int, sources: int = 30, router: str = "meaning"
) -> dict[str, float]:
    """A router by meaning (``meaning``: the walk, memdir.engine.spread; ``nearest``:
    memdir.engine.meaning) with ``bundles`` bundles holding
    ``articles`` articles in all, routing one source at a time: the first call (every
    article embedded and stored in a fresh on-disk vector cache), the first call of a second
    process (the in-process vectors dropped: every article read from the cache, as a CLI
    consolidate after the first) and the per-source p50/p95 after it."""
    import tempfile

    from memdir.engine import meaning, spread
    from memdir.engine.program import Bundle
    from memdir.index import routevectors as vectorcache
    from memdir.settings import Settings

    embed, why = meaning.embedder_for(Settings())
    if embed is None:
        raise SystemExit(f"routing cost needs the embedder: {why}")

    def route(items: list[tuple[str, str]], disk: vectorcache.VectorCache) -> None:
        if router == "nearest":
            meaning.route_all(embed, specs, items, members, meaning.Tuning(), disk)
        else:
            spread.route_all(embed, specs, items, members, spread.SpreadTuning(), disk)

    rng = random.Random(bundles * 7 + articles)
    vocab = [w for words in WORDS.values() for w in words] + FILLER
    specs = [Bundle(f"b{n}", "Notes on " + ", ".join(rng.sample(vocab, 4))) for n in range(bundles)]
    members: dict[str, list[str]] = {b.name: [] for b in specs}
    names = list(WORDS)
    for n in range(articles):
        members[specs[n % bundles].name].append(source(rng, names[n % 3], n))
    probe = [(f"s{n}", source(rng, names[n % 3], articles + n)) for n in range(sources + 1)]
    tmp = tempfile.TemporaryDirectory(prefix="memdir-routecost-")
    disk = vectorcache.VectorCache(Path(tmp.name) / vectorcache.FILE)
    t0 = time.perf_counter()
    route(probe[:1], disk)
    first = time.perf_counter() - t0
    meaning._MEMBERS.clear()  # a second process: nothing in memory, the cache on disk
    disk.close()
    disk = vectorcache.VectorCache(Path(tmp.name) / vectorcache.FILE)
    t0 = time.perf_counter()
    route(probe[1:2], disk)
    second = time.perf_counter() - t0
    times = []
    for item in probe[2:]:
        t = time.perf_counter()
        route([item], disk)
        times.append(time.perf_counter() - t)
    disk.close()
    tmp.cleanup()
    times.sort()
    return {
        "first_s": first,
        "second_process_s": second,
        "p50_ms": 1000 * times[len(times) // 2],
        "p95_ms": 1000 * times[min(len(times) - 1, int(0.95 * len(times)))],
    }


def _init(tmp: Path) -> Path:
    from memdir.files.store import Store

    return Store.init(tmp / "store")


def snapshot(total: int) -> int:
    from memdir.doc.tokencount import count
    from memdir.engine import reflect

    now = datetime(2026, 6, 1, tzinfo=UTC)
    eps = [
        reflect.Episode(
            f"episodes/life/e{n}.md",
            f"life-{n}",
            "life",
            now - timedelta(minutes=n),
            f"situation number {n} about routing and recall",
            "success",
            (f"insight {n % 200} about keeping sources cited",),
        )
        for n in range(total)
    ]
    lessons = reflect.lessons_from(eps)
    text = reflect.render_snapshot(
        identity="An agent that keeps what it learns as small cited articles.",
        lessons=lessons,
        recent=eps[:5],
        decisions=[],
        cap=1500,
        count=count,
    )
    return count(text)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="250,500,1000")
    parser.add_argument("--episodes", default="1000,10000,100000")
    parser.add_argument(
        "--routing", default="100,10000", help="BUNDLES,ARTICLES for the routing cost ('' skips)"
    )
    parser.add_argument(
        "--router",
        default="meaning",
        choices=["meaning", "nearest"],
        help="the router whose cost is measured (meaning: the walk, the default)",
    )
    args = parser.parse_args()
    if args.routing:
        b, a = (int(x) for x in args.routing.split(","))
        cost = routing_cost(b, a, router=args.router)
        print(
            f"| routing by meaning ({args.router}) | bundles | articles | first call s "
            "| second process first call s | p50 ms | p95 ms |"
        )
        print("|---|---|---|---|---|---|---|")
        print(
            f"| one source at a time | {b} | {a} | {cost['first_s']:.1f} | "
            f"{cost['second_process_s']:.1f} | {cost['p50_ms']:.1f} | {cost['p95_ms']:.1f} |"
        )
        print()
    print("| sources | ingest s | consolidate s | articles | ms per source |")
    print("|---|---|---|---|---|")
    for size in [int(s) for s in args.sizes.split(",") if s]:
        ingest_s, cons_s, articles = consolidate(size)
        print(
            f"| {size} | {ingest_s:.2f} | {cons_s:.2f} | {articles} | {1000 * cons_s / size:.1f} |"
        )
    print()
    print("| episodes | snapshot tokens (cap 1500) |")
    print("|---|---|")
    for total in [int(s) for s in args.episodes.split(",") if s]:
        print(f"| {total} | {snapshot(total)} |")


if __name__ == "__main__":
    main()
