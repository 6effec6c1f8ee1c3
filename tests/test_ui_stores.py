"""The web UI of each store of a many-store server at /stores/NAME/ (a picker at /): every
link, form and redirect stays below the store's root, each store signs in with its own
tokens, and a session of one store opens no other."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from helpers import create_token
from http_server import serving
from memdir.files.catalogue import Catalogue
from memdir.http.stores import StoreRouter
from memdir.service import Memory
from uistore import build, opener


def stores(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name in ("alpha", "beta"):
        out[name] = build(tmp_path / name).root
    (out["beta"] / "wiki" / "only-beta.md").write_text("# Only in beta\n\nbeta words\n")
    return out


def links_of(html: str) -> list[str]:
    return re.findall(r'(?:href|src|action|data-src)="([^"#]*)"', html)


def test_each_store_serves_its_ui_below_its_root(tmp_path: Path) -> None:
    roots = stores(tmp_path)
    with (
        serving(StoreRouter(Catalogue(roots), opener)) as (url, _),
        httpx.Client(base_url=url, timeout=30) as client,
    ):
        picker = client.get("/")
        assert picker.status_code == 200 and "Content-Security-Policy" in picker.headers
        assert links_of(picker.text) == ["/stores/alpha/", "/stores/beta/"]
        bare = client.get("/stores/alpha")
        assert bare.status_code == 303 and bare.headers["location"] == "/stores/alpha/"
        assert client.get("/", params={"store": "beta"}).headers["location"] == "/stores/beta/"
        seen: set[str] = set()
        for page in ("/", "/browse", "/search?q=starter&mode=bm25", "/coverage", "/graph"):
            answer = client.get("/stores/alpha" + page)
            assert answer.status_code == 200, (page, answer.text[:300])
            links = [u for u in links_of(answer.text) if u.startswith("/")]
            assert links and all(u.startswith("/stores/alpha/") for u in links), (page, links)
            seen.update(links)
        # every link a page names opens (the documents, threads and turns of this store)
        for link in sorted(seen):
            if "signout" in link or "release" in link:
                continue
            assert client.get(link).status_code == 200, link
        assert any(u.startswith("/stores/alpha/doc/wiki/") for u in seen)
        thread = client.get("/stores/alpha/thread/t1").text
        turn = next(u for u in links_of(thread) if u.startswith("/stores/alpha/turn/"))
        dag = client.get(turn).text
        assert all(u.startswith("/stores/alpha/") for u in links_of(dag) if u.startswith("/"))
        rye = client.get("/stores/alpha/doc/wiki/kitchen/notes/rye.md").text
        assert 'href="/stores/alpha/doc/wiki/kitchen/notes/starter.md"' in rye  # a wikilink
        # each store is its own memory
        assert client.get("/stores/beta/doc/wiki/only-beta.md").status_code == 200
        assert client.get("/stores/alpha/doc/wiki/only-beta.md").status_code == 404
        assert client.get("/stores/gamma/").status_code == 404
        # a release goes back to this store's coverage page
        [entry] = Memory.open(roots["alpha"]).quarantine_list()
        done = client.post(
            "/stores/alpha/coverage/release",
            data={"path": entry["path"], "bundle": "money"},
            headers={"Origin": url},
        )
        assert done.status_code == 303
        assert done.headers["location"].startswith("/stores/alpha/coverage?released=")
        assert "inbox/" in client.get(done.headers["location"]).text


def test_each_store_signs_in_with_its_own_tokens(tmp_path: Path) -> None:
    roots = stores(tmp_path)
    alpha = create_token(roots["alpha"], "ana", "read")
    beta = create_token(roots["beta"], "bo", "read", "wiki/")
    with serving(StoreRouter(Catalogue(roots), opener)) as (url, _):
        client = httpx.Client(base_url=url, timeout=30)
        first = client.get("/stores/alpha/browse")
        assert first.status_code == 303
        assert first.headers["location"] == "/stores/alpha/signin?next=%2Fstores%2Falpha%2Fbrowse"
        form = client.get(first.headers["location"])
        assert form.status_code == 200 and 'action="/stores/alpha/signin"' in form.text
        wrong = client.post("/stores/alpha/signin", data={"token": beta}, headers={"Origin": url})
        assert wrong.status_code == 401  # beta's token is not alpha's
        signed = client.post(
            "/stores/alpha/signin",
            data={"token": alpha, "next": "/stores/alpha/browse"},
            headers={"Origin": url},
        )
        assert signed.status_code == 303 and signed.headers["location"] == "/stores/alpha/browse"
        cookie = signed.headers["set-cookie"]
        assert "Path=/stores/alpha/" in cookie and "HttpOnly" in cookie
        assert client.get("/stores/alpha/browse").status_code == 200
        # the cookie is alpha's: beta still asks for its own sign-in, even sent by hand
        value = cookie.split(";")[0].split("=", 1)[1]
        forged = httpx.Client(base_url=url, cookies={"memdir_session": value}, timeout=30)
        assert forged.get("/stores/beta/browse").status_code == 303
        assert forged.get("/stores/alpha/browse").status_code == 200
        # next= may not lead to another store after signing in
        other = client.post(
            "/stores/alpha/signin",
            data={"token": alpha, "next": "/stores/beta/"},
            headers={"Origin": url},
        )
        assert other.headers["location"] == "/stores/alpha/"
        # beta's prefix token sees only its prefix there
        client.post("/stores/beta/signin", data={"token": beta}, headers={"Origin": url})
        assert client.get("/stores/beta/doc/wiki/only-beta.md").status_code == 200
        assert client.get("/stores/beta/doc/private/vault.md").status_code == 403
        assert client.get("/stores/beta/coverage").status_code == 403
        out = client.post("/stores/alpha/signout", headers={"Origin": url})
        assert out.status_code == 303 and out.headers["location"] == "/stores/alpha/signin"
        assert client.get("/stores/alpha/browse").status_code == 303
        assert client.get("/stores/beta/doc/wiki/only-beta.md").status_code == 200
        client.close()
        forged.close()


def test_the_picker_lists_names_only_to_loopback_names(tmp_path: Path) -> None:
    roots = {"alpha": Memory.init(tmp_path / "alpha").root}
    with serving(StoreRouter(Catalogue(roots), opener)) as (url, _):
        listed = httpx.get(url + "/", headers={"Host": "localhost"})
        assert "/stores/alpha/" in listed.text
        rebound = httpx.get(url + "/", headers={"Host": "evil.test"})
        assert rebound.status_code == 200 and "alpha" not in rebound.text
        assert 'name="store"' in rebound.text
        hostile = httpx.get(url + "/", params={"store": 'a"><script>'}, follow_redirects=False)
        assert hostile.headers["location"] == "/stores/a%22%3E%3Cscript%3E/"
