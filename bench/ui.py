"""The web UI's costs: server time per page, first page load bytes, the graph's first render.

    python bench/ui.py [--count 100000] [--turns 500] [--requests 30] [--graph-nodes 10000]
                       [--writes 10] [--no-graph] [--keep DIR [--reuse]]

Builds a synthetic store (bench/synth.py: ~60 % episodes, ~40 % wiki pages with three
wikilinks each) plus one thread of ``--turns`` chained turns, indexes it once, serves it with
the real app (uvicorn on loopback, in this process) and times ``--requests`` GETs of each page
over HTTP (wall time seen by the client: the server's work plus loopback transfer), once
the views the server builds as it starts (the link graph, the tree, the memory report) are
built; how long that took after the server listened is printed as ``warm_up_ms``. Then
the first request after a write: ``--writes`` rounds, each page asked for once right after
one write through the service (a wiki page with wikilinks and a turn of the big thread, in
turn), what the first person to look after the agent wrote waits for. The
index sync every verb starts with is throttled (``store.sync_interval_seconds``), as a
running server with its watcher does. First load bytes: the home page's HTML and every asset
it names. The graph: a store of ``--graph-nodes`` small linked wiki pages, the graph page
opened in Chromium (Playwright, when installed), the time from the page's request for the
graph data to its first drawn frame, and the cost of one layout step plus redraw.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth
from memdir.doc.ids import new_id
from memdir.doc.turnrecord import TurnRecord, created_of, render_turn, turn_path
from memdir.files.store import Store
from memdir.http.app import create_app
from memdir.service import Memory

OVERRIDES: dict[str, dict[str, Any]] = {
    "embeddings": {"enabled": False},
    "store": {"sync_interval_seconds": 3600.0, "git_commit": False},
}


def chained_thread(root: Path, count: int) -> list[str]:
    """``count`` turns of thread ``big``, each the child of the one before."""
    ids: list[str] = []
    base = int(time.time() * 1000) - count * 1000
    for i in range(count):
        ident = new_id(base + i * 1000)
        rec = TurnRecord(
            id=ident,
            thread="big",
            user="ana",
            channel="bench",
            parents=(ids[-1],) if ids else (),
            created=created_of(ident),
            input=f"question {i}: how do we roll back the deploy of service {i % 17}?",
            compact="- Tools (2 calls): search, read\n- Result: ok",
            output=f"answer {i}: flip the switch back, then check the canary.",
        )
        path = root / turn_path(ident)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_turn(rec), encoding="utf-8")
        ids.append(ident)
    return ids


def graph_store(root: Path, nodes: int) -> None:
    """``nodes`` small wiki pages in 10 bundles, each linking to three others."""
    for i in range(nodes):
        folder = root / "wiki" / f"b{i % 10}" / f"topic{i % 50}"
        folder.mkdir(parents=True, exist_ok=True)
        links = " ".join(f"[[g{(i * 7 + k * 131) % nodes:05d}]]" for k in (1, 2, 3))
        (folder / f"g{i:05d}.md").write_text(f"# Page {i}\n\nSee {links}.\n", encoding="utf-8")


@contextlib.contextmanager
def serving(mem: Memory) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        create_app(mem, mcp=False), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def warm_up() -> float:
    """Milliseconds until the server's start-up build of the UI's views ends."""
    started = time.perf_counter()
    for thread in threading.enumerate():
        if thread.name == "memdir-ui-warm":
            thread.join()
    return round((time.perf_counter() - started) * 1000, 1)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def open_store(folder: Path, count: int, turns: int, reuse: bool) -> tuple[Memory, dict[str, Any]]:
    root, saved = folder / "s", folder / "info.json"
    info: dict[str, Any]
    if reuse and saved.is_file():
        info = json.loads(saved.read_text())
    else:
        Store.init(root, git=False)
        started = time.perf_counter()
        synth.generate(root, count)
        ids = chained_thread(root, turns)
        info = {"count": count, "turns": turns, "thread_last": ids[-1]}
        info["build_seconds"] = round(time.perf_counter() - started, 1)
    mem = Memory.open(root, overrides=OVERRIDES)
    if not saved.is_file():
        started = time.perf_counter()
        mem.sync(force=True)
        info["index_seconds"] = round(time.perf_counter() - started, 1)
        saved.write_text(json.dumps(info))
    return mem, info


def time_pages(url: str, pages: dict[str, str], requests: int) -> dict[str, dict[str, float]]:
    out = {}
    with httpx.Client(base_url=url, timeout=300) as client:
        for name, target in pages.items():
            first = time.perf_counter()
            answer = client.get(target)
            cold = (time.perf_counter() - first) * 1000
            if answer.status_code != 200:
                raise SystemExit(f"{target}: {answer.status_code} {answer.text[:300]}")
            times = []
            for _ in range(requests):
                started = time.perf_counter()
                answer = client.get(target)
                times.append((time.perf_counter() - started) * 1000)
                assert answer.status_code == 200
            out[name] = {
                "first_ms": round(cold, 1),
                "p50_ms": round(statistics.median(times), 1),
                "p95_ms": round(_pct(times, 0.95), 1),
                "bytes": len(answer.content),
            }
    return out


def after_writes(
    url: str, mem: Memory, pages: dict[str, str], rounds: int, last_turn: str
) -> dict[str, dict[str, float]]:
    """Each page asked for once right after one write through ``mem`` (the server's own
    service object), ``rounds`` times: a new wiki page linking to two others, then a new
    turn of the big thread, and so on."""
    times: dict[str, list[float]] = {name: [] for name in pages}
    stamp = int(time.time())
    parent = last_turn
    with httpx.Client(base_url=url, timeout=300) as client:
        for i in range(rounds):
            for name, target in pages.items():
                if i % 2 == 0:
                    mem.write(
                        f"wiki/bundle0/written/after-{stamp}-{i}-{len(times[name])}.md",
                        f"# After write {i}\n\nSee [[topic1]] and [[after-{stamp}-{i}-0]].\n",
                        actor="bench",
                    )
                else:
                    parent = mem.record_turn(
                        thread="big",
                        user="ana",
                        input=f"after write {i}: what changed?",
                        output="a page and a turn",
                        parents=[parent],
                    ).id
                started = time.perf_counter()
                answer = client.get(target)
                times[name].append((time.perf_counter() - started) * 1000)
                if answer.status_code != 200:
                    raise SystemExit(f"{target}: {answer.status_code} {answer.text[:300]}")
    return {
        name: {
            "p50_ms": round(statistics.median(values), 1),
            "p95_ms": round(_pct(values, 0.95), 1),
            "max_ms": round(max(values), 1),
        }
        for name, values in times.items()
    }


def first_load_bytes(url: str) -> dict[str, int]:
    """The home page and every stylesheet, script and icon it names."""
    with httpx.Client(base_url=url, timeout=60) as client:
        html = client.get("/").content
        sizes = {"/": len(html)}
        for ref in re.findall(rb'(?:href|src)="(/static/[^"]+)"', html):
            sizes[ref.decode()] = len(client.get(ref.decode()).content)
    return sizes


def graph_render(nodes: int, keep: Path) -> dict[str, Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return {"skipped": "playwright is not installed"}
    chromium = os.environ.get("MEMDIR_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        return {"skipped": "no chromium"}
    root = keep / "graph" / "s"
    if not root.exists():
        Store.init(root, git=False)
        graph_store(root, nodes)
    with Memory.open(root, overrides=OVERRIDES) as mem:
        started = time.perf_counter()
        mem.sync(force=True)
        index_s = time.perf_counter() - started
        with serving(mem) as url, sync_playwright() as driver:
            browser = driver.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.goto(url + "/graph")
            page.wait_for_selector("#graph[data-first-render]", timeout=120_000)
            first = int(page.locator("#graph").get_attribute("data-first-render") or 0)
            page.wait_for_timeout(3000)
            frame = float(page.locator("#graph").get_attribute("data-frame-ms") or 0)
            page.mouse.move(640, 500)
            page.mouse.wheel(0, -200)  # a zoom: one redraw, what a person waits for
            page.wait_for_timeout(200)
            redraw = float(page.locator("#graph").get_attribute("data-draw-ms") or 0)
            drawn = int(page.locator("#graph").get_attribute("data-nodes") or 0)
            json_bytes = len(httpx.get(url + "/graph.json", timeout=120).content)
            browser.close()
    return {
        "nodes": drawn,
        "first_render_ms": first,
        "layout_frame_ms": frame,
        "redraw_ms": redraw,
        "graph_json_bytes": json_bytes,
        "index_seconds": round(index_s, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--graph-nodes", type=int, default=10_000)
    parser.add_argument("--writes", type=int, default=10, help="rounds of one write, one GET")
    parser.add_argument("--no-graph", action="store_true", help="skip the Chromium graph run")
    parser.add_argument("--keep", type=Path)
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        keep = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        folder = keep / f"ui-{args.count}"
        folder.mkdir(parents=True, exist_ok=True)
        mem, info = open_store(folder, args.count, args.turns, args.reuse)
        stack.callback(mem.close)
        wiki = next(p["path"] for p in mem.ls("wiki/bundle0/topic1/"))
        pages = {
            "home": "/",
            "search": "/search?q=rollback+canary+latency&mode=bm25",
            "document": "/doc/" + wiki,
            f"thread ({args.turns} turns)": f"/thread/big?last={args.turns}",
            "turn DAG": f"/turn/{info['thread_last']}",
            "coverage": "/coverage",
            "browse": "/browse",
            "graph": "/graph",
            "graph data": "/graph.json",
        }
        with serving(mem) as url:
            result: dict[str, Any] = {"store": info, "warm_up_ms": warm_up()}
            result["pages"] = time_pages(url, pages, args.requests)
            if args.writes:
                result["after_write"] = after_writes(
                    url, mem, pages, args.writes, info["thread_last"]
                )
            sizes = first_load_bytes(url)
            result["first_load_bytes"] = {"total": sum(sizes.values()), **sizes}
        if not args.no_graph:
            result["graph"] = graph_render(args.graph_nodes, keep)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
