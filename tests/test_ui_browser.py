"""The web UI in a real browser: Debian's Chromium driven by Playwright against a real
server on loopback. Skipped, saying why, when Playwright or Chromium is missing
(``make ui-browser`` installs both where it can).

``MEMDIR_UI_SCREENSHOTS=1`` writes a screenshot of each page to docs/ui/.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from helpers import create_token
from http_server import Live, live_server, serving
from memdir.files.catalogue import Catalogue
from memdir.http.stores import StoreRouter
from memdir.service import Memory
from uistore import OFFLINE, UIStore, build, opener

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed: make ui-browser"
)
CHROMIUM = os.environ.get("MEMDIR_CHROMIUM") or next(
    (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None
)
if CHROMIUM is None:
    pytest.skip(
        "no Chromium found (apt-get install chromium, or set MEMDIR_CHROMIUM): make ui-browser",
        allow_module_level=True,
    )

SHOTS = Path(__file__).resolve().parents[1] / "docs" / "ui"
TIMEOUT_MS = 15_000


def shoot(page: Any, name: str) -> None:
    if os.environ.get("MEMDIR_UI_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as driver:
        launched = driver.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> UIStore:
    return build(tmp_path_factory.mktemp("ui"))


@pytest.fixture(scope="module")
def live(store: UIStore) -> Iterator[Live]:
    with live_server(store.root, OFFLINE, mcp=False) as server:
        yield server


@pytest.fixture
def page(browser: Any, live: Live) -> Iterator[Any]:
    context = browser.new_context(base_url=live.url, viewport={"width": 1280, "height": 860})
    tab = context.new_page()
    tab.set_default_timeout(TIMEOUT_MS)
    problems: list[str] = []
    tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: problems.append(str(e)))
    yield tab
    context.close()
    # a script error or a Content-Security-Policy refusal shows here
    assert problems == []


def test_each_page_opens_with_its_heading(page: Any, store: UIStore) -> None:
    t1 = store.turns[0]
    pages = [
        ("home", "/", "Memory"),
        ("search", "/search?q=starter&mode=bm25", "Search"),
        ("browse", "/browse", "Browse"),
        ("document", "/doc/wiki/kitchen/notes/rye.md", "Rye bread"),
        ("thread", "/thread/t1", "Thread t1"),
        ("turn", f"/turn/{store.turns[1]}", "Turn"),
        ("coverage", "/coverage", "Coverage"),
        ("graph", "/graph", "Link graph of the wiki"),
        ("live", "/live", "Live"),
    ]
    for name, url, heading in pages:
        page.goto(url)
        assert page.locator("main h1").first.inner_text().startswith(heading), url
        if name == "graph":
            page.wait_for_selector("#graph[data-first-render]")
        if name == "live":
            page.wait_for_selector("#live-status:has-text('connected')")
        shoot(page, name)
    page.emulate_media(color_scheme="dark")
    page.goto("/")
    dark = page.evaluate("getComputedStyle(document.body).backgroundColor")
    page.emulate_media(color_scheme="light")
    light = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert dark != light
    page.emulate_media(color_scheme="dark")
    shoot(page, "home-dark")
    assert t1


def test_search_then_open_a_result(page: Any) -> None:
    page.goto("/search")
    page.get_by_label("Query").fill("open crumb")
    page.get_by_label("Mode").select_option("bm25")
    page.get_by_label("Query").press("Enter")
    page.wait_for_url("**/search?q=open+crumb*")
    first = page.locator("#results .hit a.open").first
    assert "Crumb" in first.inner_text()
    first.click()
    page.wait_for_url("**/doc/wiki/kitchen/notes/crumb.md")
    assert page.locator("#body h1").inner_text() == "Crumb"
    assert (
        "rye.md" in page.locator("#backlinks").inner_text().lower()
        or page.locator("#backlinks a").count() == 1
    )


def test_keys_reach_search_and_pages(page: Any) -> None:
    page.goto("/")
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "quick-q"
    page.keyboard.press("Escape")
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("g")
    page.keyboard.press("b")
    page.wait_for_url("**/browse")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.tagName") in ("A", "SUMMARY")
    page.keyboard.press("j")
    second = page.evaluate("document.activeElement.textContent")
    page.keyboard.press("k")
    page.keyboard.press("j")
    assert page.evaluate("document.activeElement.textContent") == second


def test_walk_a_thread_open_its_work_log_and_a_turns_graph(page: Any, store: UIStore) -> None:
    t1, t2, t3 = store.turns
    page.goto("/")
    page.locator("#latest a", has_text="t1").first.click()
    page.wait_for_url("**/thread/t1")
    turns = page.locator("#timeline > li")
    assert turns.count() == 3
    first = turns.nth(0)
    assert "How do I feed the starter?" in first.inner_text()
    first.locator("details.worklog summary").click()
    page.wait_for_selector("#timeline details.worklog pre:has-text('grep')")
    first.locator("h2 a").click()
    page.wait_for_url(f"**/turn/{t1}")
    nodes = page.locator("svg.dag a.dagnode")
    assert sorted(nodes.nth(i).get_attribute("data-id") for i in range(nodes.count())) == sorted(
        [t1, t2, t3]
    )
    page.locator(f'svg.dag a.dagnode[data-id="{t3}"]').click()
    page.wait_for_url(f"**/turn/{t3}")
    assert page.locator('svg.dag a.dagnode[data-id="wiki/kitchen/notes/rye.md"]').count() == 1
    shoot(page, "turn-dag")


def test_release_a_quarantined_source(page: Any, live: Live) -> None:
    [entry] = live.mem.quarantine_list()
    page.goto("/coverage")
    item = page.locator(".qitem", has_text=entry["path"])
    item.get_by_label("Bundle").select_option("money")
    item.get_by_label("Topic").fill("tax")
    item.get_by_role("button", name="Release").click()
    page.wait_for_url("**/coverage?released=*")
    assert "Released " + entry["path"] in page.locator("[role=status]").inner_text()
    assert live.mem.quarantine_list() == []


def test_a_new_turn_appears_live(page: Any, live: Live) -> None:
    page.goto("/live")
    page.wait_for_selector("#live-status:has-text('connected')")
    record = live.mem.record_turn(thread="live-thread", input="is this live?", output="yes")
    page.wait_for_selector(f'#live a[href="/turn/{record.id}"]')
    page.goto("/")
    page.wait_for_timeout(300)
    second = live.mem.record_turn(thread="live-thread", input="and here?", output="too")
    page.wait_for_selector(f'#latest a[href="/turn/{second.id}"]')


def test_the_graph_draws_every_wiki_page(page: Any, live: Live) -> None:
    expected = len(live.client().get("/graph.json").json()["nodes"])
    page.goto("/graph")
    page.wait_for_selector("#graph[data-first-render]")
    assert int(page.locator("#graph").get_attribute("data-nodes")) == expected > 0
    page.get_by_label("Find", exact=True).fill("rye")
    assert "found: Rye bread" in page.locator("#graph-status").inner_text()
    page.get_by_label("Find", exact=True).press("Enter")
    page.wait_for_url("**/doc/wiki/kitchen/notes/rye.md")


def test_a_prefix_token_signs_in_and_stays_inside(browser: Any, tmp_path: Path) -> None:
    store = build(tmp_path)
    token = create_token(store.root, "wikireader", "read", "wiki/")
    with live_server(store.root, OFFLINE, mcp=False) as server:
        context = browser.new_context(base_url=server.url)
        tab = context.new_page()
        tab.set_default_timeout(TIMEOUT_MS)
        tab.goto("/browse")
        tab.wait_for_url("**/signin?next=%2Fbrowse")
        shoot(tab, "signin")
        tab.get_by_label("Token").fill(token)
        tab.get_by_role("button", name="Sign in").click()
        tab.wait_for_url("**/browse")
        assert "wikireader" in tab.locator(".who").inner_text()
        text = tab.locator("main").text_content() or ""
        assert "Rye bread" in text and "Vault" not in text and "t1" not in text
        cookies = context.cookies()
        [session] = [c for c in cookies if c["name"] == "memdir_session"]
        assert session["httpOnly"] and session["sameSite"] == "Strict"
        assert token not in session["value"]
        assert tab.evaluate("document.cookie") == ""  # not readable by scripts
        tab.goto("/search?q=swordfish&mode=bm25")
        assert "Nothing found." in tab.locator("#results").inner_text()
        answer = tab.goto("/doc/private/vault.md")
        assert answer is not None and answer.status == 403
        assert "swordfish" not in tab.content()
        answer = tab.goto("/coverage")
        assert answer is not None and answer.status == 403
        answer = tab.goto(f"/turn/{store.turns[0]}")
        assert answer is not None and answer.status == 403
        context.close()


def test_a_store_of_many_works_below_its_root(browser: Any, tmp_path: Path) -> None:
    """``memdir serve --store NAME=PATH``: the picker leads to a store's UI, and every
    request its pages, forms and scripts make (search, the graph's data, work logs, the
    live stream, a click in the graph) stays below ``/stores/NAME/``."""
    roots = {name: build(tmp_path / name).root for name in ("alpha", "beta")}
    with serving(StoreRouter(Catalogue(roots), opener)) as (url, _):
        context = browser.new_context(base_url=url)
        tab = context.new_page()
        tab.set_default_timeout(TIMEOUT_MS)
        asked: list[str] = []
        problems: list[str] = []
        tab.on("request", lambda r: asked.append(urlsplit(r.url).path))
        tab.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        tab.on("pageerror", lambda e: problems.append(str(e)))
        tab.goto("/")
        tab.get_by_role("link", name="alpha").click()
        tab.wait_for_url("**/stores/alpha/")
        assert tab.locator("main h1").first.inner_text().startswith("Memory")
        tab.goto("/stores/alpha/search")
        tab.get_by_label("Query").fill("open crumb")
        tab.get_by_label("Mode").select_option("bm25")
        tab.get_by_label("Query").press("Enter")
        tab.wait_for_url("**/stores/alpha/search?q=open+crumb*")
        tab.locator("#results .hit a.open").first.click()
        tab.wait_for_url("**/stores/alpha/doc/wiki/kitchen/notes/crumb.md")
        tab.goto("/stores/alpha/thread/t1")
        tab.locator("#timeline > li").nth(0).locator("details.worklog summary").click()
        tab.wait_for_selector("#timeline details.worklog pre:has-text('grep')")
        tab.goto("/stores/alpha/graph")
        tab.wait_for_selector("#graph[data-first-render]")
        tab.get_by_label("Find", exact=True).fill("rye")
        tab.get_by_label("Find", exact=True).press("Enter")
        tab.wait_for_url("**/stores/alpha/doc/wiki/kitchen/notes/rye.md")
        tab.goto("/stores/alpha/live")
        tab.wait_for_selector("#live-status:has-text('connected')")
        with Memory.open(roots["alpha"], overrides=OFFLINE) as mem:
            record = mem.record_turn(thread="many", input="seen below the root?", output="yes")
        tab.wait_for_selector(f'#live a[href="/stores/alpha/turn/{record.id}"]')
        tab.locator(f'#live a[href="/stores/alpha/turn/{record.id}"]').click()
        tab.wait_for_url(f"**/stores/alpha/turn/{record.id}")
        context.close()
    outside = [p for p in asked if p != "/" and not p.startswith("/stores/alpha/")]
    assert outside == [] and "/stores/alpha/graph.json" in asked
    assert any(p.startswith("/stores/alpha/events") for p in asked)
    assert problems == []
