"""The web UI at / on a real server (uvicorn on loopback, a real store, real git): each
page, what it shows, sign-in sessions, scope and prefix, the Origin rule, live events."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import httpx
import pytest

from helpers import create_token, git
from http_server import Live, live_server
from memdir.index import uirows
from uistore import OFFLINE, UIStore, build


@pytest.fixture
def store(tmp_path: Path) -> UIStore:
    return build(tmp_path)


@pytest.fixture
def live(store: UIStore) -> Iterator[Live]:
    with live_server(store.root, OFFLINE, mcp=False) as server:
        yield server


def text_of(html: str) -> str:
    """The visible text of a page, tags dropped, spaces folded."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def count_on(html: str, key: str) -> int:
    found = re.search(rf'data-count="{key}"><dt>{key}</dt><dd>([0-9.]+)', html)
    assert found, f"no {key} count on the page"
    return int(float(found.group(1)))


def test_home_counts_match_the_store(live: Live, store: UIStore) -> None:
    page = live.client().get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    rows = uirows.visible(live.mem.index.conn)
    turns = [r for r in rows if r.type == "turn"]
    assert count_on(page.text, "turns") == len(turns) == 3
    assert count_on(page.text, "threads") == 1
    assert count_on(page.text, "quarantine") == len(live.mem.quarantine_list()) == 1
    inbox = len(list((store.root / "inbox").glob("*.md")))
    assert count_on(page.text, "inbox") == inbox
    report = live.mem.memory_report()
    assert f"{report.coverage_pct:.1f}%" in page.text
    # the drift plot has one point per refine run recorded in runs.tsv
    refines = (store.root / ".memdir" / "runs.tsv").read_text().count("\trefine\t")
    plot = page.text.split("Drift (refine")[1].split("</svg>")[0]
    assert plot.count("<circle") + plot.count('class="regress"') == refines >= 2
    assert "The snapshot the agent sees" in page.text
    for ident in store.turns:  # the latest turns link to their records
        assert ident in page.text
    assert (
        "Content-Security-Policy" in page.headers
        and "script-src 'self'" in page.headers["Content-Security-Policy"]
    )


def test_a_regression_is_marked_on_the_trend(live: Live, store: UIStore) -> None:
    runs = store.root / ".memdir" / "runs.tsv"
    with runs.open("a") as fh:
        fh.write("2030-01-01T00:00:00Z\trefine\tok\trun=refine regress drift=7 delta=+7\n")
    rows = [line.split("\t") for line in runs.read_text().splitlines()[1:]]
    regressed = [r for r in rows if r[1] == "refine" and "regress" in r[3].split()]
    page = live.client().get("/").text
    plot = page.split("Drift (refine")[1].split("</svg>")[0]
    assert plot.count('class="regress"') == len(regressed) >= 1
    assert "2030-01-01T00:00:00Z: 7 (regress)" in plot


def test_markdown_is_rendered_safe_and_links_resolve(live: Live) -> None:
    page = live.client().get("/doc/wiki/kitchen/notes/rye.md")
    assert page.status_code == 200
    body = page.text.split('id="body">')[1].split("</article>")[0]
    assert "<script" not in body and "onerror" not in body.replace("onerror=&quot;", "")
    assert "&lt;script&gt;" in body and "&lt;img" in body  # raw HTML is shown as text
    assert "javascript:" not in body.lower().replace("(javascript:alert(1))", "")
    assert 'href="javascript' not in body and 'src="data:' not in body
    assert (
        '<a class="wikilink" href="/doc/wiki/kitchen/notes/starter.md">sourdough starter</a>'
        in body
    )
    assert 'href="/doc/wiki/kitchen/notes/crumb.md"' in body  # a relative markdown link
    assert '<th scope="row">related</th>' in page.text  # the frontmatter table


def test_document_has_backlinks_history_and_a_diff_per_commit(live: Live, store: UIStore) -> None:
    client = live.client()
    page = client.get("/doc/wiki/kitchen/notes/starter.md").text
    backlinks = page.split('id="backlinks">')[1].split("</ul>")[0]
    assert "/doc/wiki/kitchen/notes/rye.md" in backlinks
    shas = git(store.root, "log", "--format=%H", "--", "wiki/kitchen/notes/starter.md").split()
    history = page.split('id="history">')[1].split("</ol>")[0]
    assert len(shas) == 2 and all(sha[:8] in history for sha in shas)
    newest = client.get(f"/doc/wiki/kitchen/notes/starter.md?commit={shas[0]}").text
    diff = text_of(newest.split('id="diff"')[1])
    assert "+Keep it warm." in diff and "+# Starter" not in diff
    oldest = client.get(f"/doc/wiki/kitchen/notes/starter.md?commit={shas[1]}").text
    assert "+# Starter" in text_of(oldest.split('id="diff"')[1])
    assert "bo" in history and "ana" in history  # each commit's author (the actor)
    target = store.root.parent / "written-by-git"
    bad = client.get("/doc/wiki/kitchen/notes/starter.md", params={"commit": f"--output={target}"})
    assert bad.status_code == 400 and "commit: a commit id of 7 to 64 hex digits" in bad.text
    assert not target.exists()  # a commit that is not hex never reaches git as an option
    odd = client.get("/doc/wiki/kitchen/notes/starter.md", params={"commit": "abcdef12<x"})
    assert odd.status_code == 400 and "abcdef12" not in odd.text  # not shown cut to a prefix


def test_a_turn_record_links_to_its_graph_and_citations_resolve(live: Live, store: UIStore) -> None:
    client = live.client()
    article = next(p for p in live.mem.ls("wiki/kitchen/") if "sourdough" in p["path"])
    page = client.get("/doc/" + article["path"]).text
    cites = page.split("<h2>Citations</h2>")[1].split("</section>")[0]
    assert 'href="/doc/inbox/' in cites or 'href="/doc/' in cites
    assert '<sup class="cite"><a href="/doc/' in page  # the [^id] in the body is a link
    rec = client.get(f"/doc/{live.mem.turn_show(store.turns[0]).path}").text
    assert f'href="/turn/{store.turns[0]}"' in rec


def test_search_shows_pointers_with_why_and_filters(live: Live) -> None:
    client = live.client()
    page = client.get("/search", params={"q": "starter", "mode": "bm25"}).text
    results = page.split('id="results">')[1].split("</ol>")[0]
    paths = re.findall(r'class="path">([^<]+)<', results)
    assert "wiki/kitchen/notes/starter.md" in paths
    assert "why:" in results and re.search(r'class="score"[^>]*>-?[0-9.]+(e[+-][0-9]+)?<', results)
    narrowed = client.get("/search", params={"q": "starter", "mode": "bm25", "prefix": "episodes/"})
    kept = re.findall(r'class="path">([^<]+)<', narrowed.text.split('id="results">')[1])
    assert kept and all(p.startswith("episodes/") for p in kept)
    by_thread = client.get(
        "/search", params={"q": "starter", "mode": "bm25", "thread": "t1", "user": "ana"}
    )
    kept = re.findall(r'class="path">([^<]+)<', by_thread.text.split('id="results">')[1])
    assert kept and all(p.startswith("episodes/turns/") for p in kept)
    future = client.get("/search", params={"q": "starter", "mode": "bm25", "since": "2999-01-01"})
    assert "Nothing found." in future.text
    assert client.get("/search", params={"q": "x", "since": "soon"}).status_code == 400
    assert client.get("/search", params={"q": "x", "mode": "magic"}).status_code == 400


def test_browse_groups_the_store_and_hides_quarantine(live: Live, store: UIStore) -> None:
    page = live.client().get("/browse").text
    day = live.mem.turn_show(store.turns[0]).created[:10]
    assert f"<summary>{day} (3)</summary>" in page
    assert "<summary>kitchen</summary>" in page and "notes (3)" in page
    [quarantined] = live.mem.quarantine_list()
    assert quarantined["path"] not in page
    assert "Inbox (" in page


def test_browse_opens_a_folder_by_pages(live: Live, store: UIStore) -> None:
    from memdir.http.ui import livetree

    client = live.client()
    page = client.get("/browse", params={"prefix": "wiki/kitchen/"}).text
    listed = re.findall(r'class="path">([^<]+)<', page)
    visible = [
        r.path for r in uirows.visible(live.mem.index.conn) if r.path.startswith("wiki/kitchen/")
    ]
    assert listed == visible and "wiki/kitchen/notes/rye.md" in listed
    for i in range(livetree.INLINE_GROUP + 1):  # a group too large to list inline
        (store.root / "wiki" / "kitchen" / "big" / f"p{i:03d}.md").parent.mkdir(exist_ok=True)
        (store.root / "wiki" / "kitchen" / "big" / f"p{i:03d}.md").write_text(f"# P{i}\n")
    tree = client.get("/browse").text
    assert f"Open all {livetree.INLINE_GROUP + 1} under wiki/kitchen/big/" in tree
    assert "/doc/wiki/kitchen/big/p000.md" not in tree
    first = client.get("/browse", params={"prefix": "wiki/kitchen/big/", "offset": "0"}).text
    assert "/doc/wiki/kitchen/big/p000.md" in first
    assert client.get("/browse", params={"prefix": "x", "offset": "-1"}).status_code == 400


def test_thread_timeline_and_context_pack(live: Live, store: UIStore) -> None:
    page = live.client().get("/thread/t1").text
    timeline = page.split('id="timeline">')[1].split("</ol>")[0]
    inputs = ["How do I feed the starter?", "And for rye?", "How long to proof?"]
    places = [timeline.index(text) for text in inputs]
    assert places == sorted(places)  # oldest first
    pack = live.mem.context("t1", "ana")
    table = page.split('class="pack"')[1].split("</table>")[0]
    assert table.count("<tr>") - 1 == len(pack.items) > 0
    for item in pack.items:
        assert item.reason in unescape(table) and f"<td>{item.tokens}</td>" in table
    assert live.client().get("/thread/nobody").status_code == 404


def test_a_long_thread_shows_its_newest_turns_whole(
    live: Live, store: UIStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memdir.http.ui import model

    monkeypatch.setattr(model, "FULL_TURNS", 1)
    page = live.client().get("/thread/t1").text
    timeline = page.split('id="timeline">')[1].split("</ol>")[0]
    assert "How long to proof?" in timeline and "And for rye?" not in timeline
    earlier = re.findall(r'href="/turn/([^"]+)"', page.split('id="earlier">')[1].split("</ol>")[0])
    assert earlier == store.turns[:2]  # oldest first, each a link to its turn
    assert "3 turns" in page


def test_turn_page_draws_its_ancestors_and_descendants(live: Live, store: UIStore) -> None:
    t1, t2, t3 = store.turns
    page = live.client().get(f"/turn/{t2}").text
    dag = page.split('id="dag">')[1].split("</svg>")[0]
    ids = re.findall(r'data-id="([^"]+)"', dag)
    assert sorted(ids) == sorted([t1, t2, t3])
    assert dag.count('class="edge"') == 2  # t1 -> t2, t2 -> t3
    top = live.client().get(f"/turn/{t3}").text.split('id="dag">')[1]
    assert 'data-id="wiki/kitchen/notes/rye.md"' in top  # a document parent
    log = live.client().get(f"/turn/{t1}/worklog")
    assert log.status_code == 200 and '"tool": "grep"' in log.text.replace(
        '"tool":"grep"', '"tool": "grep"'
    )
    assert live.client().get("/turn/not-a-turn").status_code == 404


def test_graph_json_holds_the_wiki_links(live: Live) -> None:
    data = live.client().get("/graph.json").json()
    paths = [n["path"] for n in data["nodes"]]
    assert all(p.startswith("wiki/") for p in paths)
    edges = {(paths[a], paths[b]) for a, b in data["edges"]}
    assert ("wiki/kitchen/notes/rye.md", "wiki/kitchen/notes/starter.md") in edges
    assert ("wiki/kitchen/notes/rye.md", "wiki/kitchen/notes/crumb.md") in edges
    assert "kitchen" in data["bundles"]
    one = live.client().get("/graph.json", params={"bundle": "money"}).json()
    assert all(n["path"].startswith("wiki/money/") for n in one["nodes"])
    page = live.client().get("/graph").text
    assert '<canvas id="graph"' in page and "/static/graph.js" in page


def test_release_from_the_coverage_page_is_a_commit_by_the_person(
    live: Live, store: UIStore
) -> None:
    client = live.client()
    page = client.get("/coverage").text
    [entry] = live.mem.quarantine_list()
    assert entry["path"] in page and "no bundle scope fits" in page
    unmerged = live.mem.memory_report().unmerged
    turns = sum(1 for e in unmerged if e.path.startswith("episodes/turns/"))
    assert turns == 3 and f"episodes/turns {turns}" in page  # unmerged, by folder
    form = {"path": entry["path"], "bundle": "money", "topic": "tax"}
    refused = client.post("/coverage/release", data=form)  # no Origin: not from its pages
    assert refused.status_code == 403 and live.mem.quarantine_list() == [entry]
    foreign = client.post("/coverage/release", data=form, headers={"Origin": "http://evil.test"})
    assert foreign.status_code == 403 and live.mem.quarantine_list() == [entry]
    done = client.post("/coverage/release", data=form, headers={"Origin": live.url})
    assert done.status_code == 303 and done.headers["location"].startswith("/coverage?released=")
    assert live.mem.quarantine_list() == []
    live.mem.close()  # flush the server's batched commit
    assert git(store.root, "log", "-1", "--format=%an").strip() == "web"


def test_the_coverage_page_says_who_quarantined_a_source(live: Live) -> None:
    client = live.client()
    [by_router] = live.mem.quarantine_list()
    assert "(by " not in client.get("/coverage").text
    live.mem.ingest([("fish.md", "# The fish\n\nThe neighbour's goldfish need feeding.\n")])
    packet = live.mem.consolidate(plan=True)
    listed = [i["source"]["path"] for i in packet["items"]] + [
        q["source"] for q in packet["quarantine"]
    ]
    [fish] = [path for path in listed if "fish" in path]
    held = {"source": fish, "reason": "the neighbour's pets"}
    live.mem.consolidate(apply={"quarantine": [held]}, actor="ana")
    page = client.get("/coverage").text
    assert 'the neighbour&#39;s pets <span class="hint">(by ana)</span>' in page
    assert page.count("(by ") == 1 and by_router["path"] in page


def test_static_assets_are_the_packages_own(live: Live) -> None:
    client = live.client()
    js = client.get("/static/ui.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    for probe in ("/static/../pages.py", "/static/%2e%2e%2fpages.py", "/static/nope.js"):
        assert client.get(probe).status_code == 404
    page = client.get("/").text
    assert "http://" not in re.sub(r'href="http://127\.0\.0\.1[^"]*"', "", page.split("<body>")[0])


def test_live_events_bring_a_new_turn(live: Live) -> None:
    seen: list[str] = []
    wanted: list[str] = []

    def listen() -> None:
        with (
            httpx.Client(base_url=live.url, timeout=20) as client,
            client.stream("GET", "/events", params={"interval": "0.2"}) as stream,
        ):
            for line in stream.iter_lines():
                seen.append(line)
                if wanted and line.startswith("data:") and wanted[0] in line:
                    return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not any("hello" in s for s in seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    record = live.mem.record_turn(thread="late-turn", input="new?", output="yes")
    wanted.append(record.id)
    thread.join(timeout=15)
    assert not thread.is_alive()
    text = "\n".join(seen)
    assert "event: turn" in text and record.id in text


# -- auth -------------------------------------------------------------------------------


@pytest.fixture
def tokens(store: UIStore) -> dict[str, str]:
    return {
        "admin": create_token(store.root, "boss", "admin"),
        "reader": create_token(store.root, "viewer", "read"),
        "wiki": create_token(store.root, "wikiwriter", "write", "wiki/"),
    }


@pytest.fixture
def guarded(store: UIStore, tokens: dict[str, str]) -> Iterator[Live]:
    with live_server(store.root, OFFLINE, mcp=False) as server:
        yield server


def sign_in(live: Live, token: str) -> httpx.Client:
    client = live.client()
    answer = client.post(
        "/signin", data={"token": token, "next": "/browse"}, headers={"Origin": live.url}
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/browse", answer.text
    return client


def test_sign_in_sets_a_strict_httponly_session_cookie(
    guarded: Live, tokens: dict[str, str]
) -> None:
    client = guarded.client()
    first = client.get("/browse")
    assert first.status_code == 303 and first.headers["location"] == "/signin?next=%2Fbrowse"
    assert client.get("/signin").status_code == 200
    wrong = client.post("/signin", data={"token": "mdt_wrong"}, headers={"Origin": guarded.url})
    assert wrong.status_code == 401 and "unknown or revoked" in wrong.text
    answer = client.post(
        "/signin",
        data={"token": tokens["reader"], "next": "/browse"},
        headers={"Origin": guarded.url},
    )
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert tokens["reader"] not in cookie
    value = cookie.split(";")[0].split("=", 1)[1]
    assert value not in (guarded.mem.store.config_file.read_text())
    assert client.get("/browse").status_code == 200
    assert "viewer · read" in client.get("/").text
    # the cookie opens the UI only, never the JSON API
    assert client.get("/v1/ls").status_code == 401
    # sign out ends the session on the server: the old cookie no longer opens a page
    assert client.post("/signout", headers={"Origin": guarded.url}).status_code == 303
    stale = httpx.Client(base_url=guarded.url, cookies={"memdir_session": value})
    assert stale.get("/browse").status_code == 303


def test_a_revoked_token_ends_its_sessions(
    guarded: Live, store: UIStore, tokens: dict[str, str]
) -> None:
    from helpers import run_cli

    client = sign_in(guarded, tokens["reader"])
    assert client.get("/").status_code == 200
    assert run_cli("token", "revoke", "viewer", cwd=store.root).returncode == 0
    assert client.get("/").status_code == 303


def test_sign_in_goes_back_only_to_this_server(guarded: Live, tokens: dict[str, str]) -> None:
    for target in ("//evil.test/x", "https://evil.test/", "/\\evil.test"):
        answer = guarded.client().post(
            "/signin",
            data={"token": tokens["reader"], "next": target},
            headers={"Origin": guarded.url},
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/"


def test_a_read_token_cannot_release(guarded: Live, tokens: dict[str, str]) -> None:
    client = sign_in(guarded, tokens["reader"])
    [entry] = guarded.mem.quarantine_list()
    assert '<form action="/coverage/release"' not in client.get("/coverage").text
    answer = client.post(
        "/coverage/release",
        data={"path": entry["path"], "bundle": "money"},
        headers={"Origin": guarded.url},
    )
    assert answer.status_code == 403 and "needs a write token" in answer.text
    assert guarded.mem.quarantine_list() == [entry]


def test_a_prefix_token_sees_only_its_prefix(
    guarded: Live, store: UIStore, tokens: dict[str, str]
) -> None:
    (store.root / "wiki" / "kitchen" / "leak.md").symlink_to(store.root / "private" / "vault.md")
    client = sign_in(guarded, tokens["wiki"])
    home = client.get("/").text
    assert count_on(home, "turns") == 0 and 'data-count="quarantine"' not in home
    assert "Health over runs" not in home
    browse = client.get("/browse").text
    assert "wiki/kitchen/notes/rye.md" in browse
    assert "private/vault.md" not in browse and "leak.md" not in browse
    assert "episodes/turns" not in browse
    for q in ("swordfish", "vault", "starter feed"):
        page = client.get("/search", params={"q": q, "mode": "bm25"}).text
        found = re.findall(r'class="path">([^<]+)<', page.split("</form>", 2)[-1])
        assert all(p.startswith("wiki/") and "leak" not in p for p in found), found
    answer = client.get("/search", params={"q": "swordfish"}).text
    assert "swordfish" not in answer.split('id="results">')[1]
    refused = client.get("/search", params={"q": "vault", "prefix": "private/"})
    assert refused.status_code == 403
    assert client.get("/doc/private/vault.md").status_code == 403
    assert client.get("/doc/wiki/kitchen/leak.md").status_code == 403
    assert client.get("/doc/wiki/kitchen/notes/rye.md").status_code == 200
    nodes = client.get("/graph.json").json()["nodes"]
    assert nodes and all(n["path"].startswith("wiki/") and "leak" not in n["path"] for n in nodes)
    assert client.get("/coverage").status_code == 403
    assert client.get("/browse", params={"prefix": "private/"}).status_code == 403
    wide = client.get("/browse", params={"prefix": ""}).text
    assert "private/" not in wide and "leak.md" not in wide and "rye.md" in wide
    assert client.get(f"/turn/{store.turns[0]}").status_code == 403
    assert client.get(f"/turn/{store.turns[0]}/worklog").status_code == 403
    assert client.get("/thread/t1").status_code == 404  # no turn of it is visible
    crumb = client.get("/doc/wiki/kitchen/notes/crumb.md").text
    assert "rye.md" in crumb.split('id="backlinks">')[1].split("</ul>")[0]


def test_a_bearer_header_works_for_pages_too(guarded: Live, tokens: dict[str, str]) -> None:
    assert guarded.client(tokens["admin"]).get("/coverage").status_code == 200
    assert guarded.client("mdt_nope").get("/coverage").status_code == 401


def test_hostile_paths_read_nothing_outside_the_store(live: Live, store: UIStore) -> None:
    client = live.client()
    for probe in (
        "/doc/%2e%2e/%2e%2e/etc/passwd",
        "/doc/../../etc/passwd",
        "/doc/.git/config",
        "/doc/.memdir/config.toml",
        "/doc/%2fetc%2fpasswd",
    ):
        answer = client.get(probe)
        assert answer.status_code in (400, 403, 404), probe
        assert "root:" not in answer.text and "[core]" not in answer.text
    for probe in ("/thread/..%2f..%2fetc", "/thread/%00"):
        assert client.get(probe).status_code in (400, 404)
    huge = httpx.Client(base_url=live.url, cookies={"memdir_session": "x" * 5000})
    assert huge.get("/").status_code == 200  # no tokens: the cookie is not even read


def test_two_people_release_the_same_source_at_once(live: Live) -> None:
    [entry] = live.mem.quarantine_list()
    form = {"path": entry["path"], "bundle": "money"}
    answers: list[int] = []

    def release() -> None:
        with live.client() as client:
            answer = client.post("/coverage/release", data=form, headers={"Origin": live.url})
            answers.append(answer.status_code)

    workers = [threading.Thread(target=release) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    # the one that comes second finds no quarantined source there: an error page, not a 500
    assert sorted(answers)[0] == 303 and all(c == 303 or 400 <= c < 500 for c in answers), answers
    assert live.mem.quarantine_list() == []
    released = list((live.mem.root / "inbox").glob("*-vat.md"))
    assert len(released) == 1


def test_live_events_keep_to_the_token_prefix(guarded: Live, tokens: dict[str, str]) -> None:
    seen: list[str] = []
    quiet = httpx.Timeout(10, read=2.0)  # the stream ends once nothing comes for 2 s

    def listen() -> None:
        headers = {"Authorization": f"Bearer {tokens['wiki']}"}
        with httpx.Client(base_url=guarded.url, headers=headers, timeout=quiet) as client:
            try:
                with client.stream("GET", "/events", params={"interval": "0.1"}) as stream:
                    for line in stream.iter_lines():
                        seen.append(line)
            except httpx.ReadTimeout:
                return

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not any("hello" in s for s in seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any('"turns": 0' in s for s in seen)  # the prefix holds no turn
    record = guarded.mem.record_turn(thread="hidden", input="secret?", output="no")
    thread.join(timeout=15)
    assert not thread.is_alive()
    assert record.id not in "\n".join(seen) and "event: turn" not in "\n".join(seen)


def test_a_revoked_token_ends_its_open_event_stream(
    guarded: Live, store: UIStore, tokens: dict[str, str]
) -> None:
    from helpers import run_cli

    seen: list[str] = []
    ended = threading.Event()

    def listen() -> None:
        client = sign_in(guarded, tokens["reader"])
        with client.stream("GET", "/events", params={"interval": "0.1"}) as stream:
            for line in stream.iter_lines():
                seen.append(line)
        ended.set()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not any("hello" in s for s in seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any("hello" in s for s in seen) and not ended.is_set()
    assert run_cli("token", "revoke", "viewer", cwd=store.root).returncode == 0
    assert ended.wait(timeout=10)  # the server closed the stream


def test_the_views_are_built_as_the_server_starts(tmp_path: Path) -> None:
    """The link graph, the tree and the memory report are built in the background when the
    server starts, so the first person to open a page does not wait for them."""
    from http_server import serving
    from memdir.http.app import create_app
    from memdir.http.ui.model import Views
    from memdir.service import Memory

    store = build(tmp_path)
    app = create_app(Memory.open(store.root, overrides=OFFLINE), mcp=False)
    with serving(app) as (url, _):
        for thread in threading.enumerate():
            if thread.name == "memdir-ui-warm":
                thread.join(timeout=30)
        views = app.state.ui_views
        assert isinstance(views, Views)
        assert (views.builds, views.tree_builds, views.report_builds) == (1, 1, 1)
        with httpx.Client(base_url=url) as client:
            assert client.get("/").status_code == 200
            assert client.get("/browse").status_code == 200
            assert client.get("/coverage").status_code == 200
        assert (views.builds, views.tree_builds, views.report_builds) == (1, 1, 1)


def test_numbers_in_the_query_are_ascii_digits_only(live: Live) -> None:
    """``²`` and ``٣`` are digits to str.isdigit; a page takes ASCII digits only, and a
    number of thousands of digits is refused, not converted (a 400, never a 500)."""
    client = live.client()
    for bad in ("²", "٣", "9" * 6000, "-1", "1.5", " 1"):
        for path, name in (("/browse", "offset"), ("/thread/t1", "last")):
            params = {name: bad, "prefix": "wiki/"} if name == "offset" else {name: bad}
            answer = client.get(path, params=params)
            assert answer.status_code == 400, (path, name, bad, answer.status_code)
    assert client.get("/browse", params={"prefix": "wiki/", "offset": "0"}).status_code == 200
