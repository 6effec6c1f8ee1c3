"""The HTTP API against a real server on a loopback port."""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import error_of, run_cli
from http_server import Live, live_server
from memdir.files.store import Store

DOC = (
    "---\ntitle: Deploys\n---\n# Deploys\n\nRoll back with the blue-green switch.\n\n"
    "## Notes\n\nKeep it short.\n"
)


@pytest.fixture
def live(store_root: Path) -> Iterator[Live]:
    with live_server(
        store_root, {"server": {"max_body_bytes": 4096}, "embeddings": {"enabled": False}}
    ) as server:
        yield server


@pytest.fixture
def client(live: Live) -> Iterator[httpx.Client]:
    with live.client() as c:
        yield c


def put(client: httpx.Client, path: str, content: str, **headers: str) -> httpx.Response:
    return client.put(f"/v1/files/{path}", json={"content": content}, headers=headers)


def test_health_answers(client: httpx.Client) -> None:
    for path in ("/health", "/v1/health"):
        response = client.get(path)
        assert response.status_code == 200
        assert response.json()["status"] == "ok"


def test_write_with_provenance_then_read(client: httpx.Client, store_root: Path) -> None:
    response = put(
        client, "wiki/ops/deploys.md", DOC, **{"X-Provenance": "run: r-42", "X-Actor": "planner"}
    )
    assert response.status_code == 201
    body = response.json()
    assert body["created"] is True and body["path"] == "wiki/ops/deploys.md"
    assert response.headers["ETag"] == body["etag"]
    on_disk = (store_root / "wiki/ops/deploys.md").read_text()
    assert "derived-from:" in on_disk and "actor: planner" in on_disk and "type: run" in on_disk
    assert "id: r-42" in on_disk or 'id: "r-42"' in on_disk

    read = client.get("/v1/files/wiki/ops/deploys.md")
    assert read.status_code == 200
    assert read.json()["content"] == on_disk
    assert read.headers["ETag"] == body["etag"]
    section = client.get("/v1/files/wiki/ops/deploys.md", params={"section": "Notes"})
    assert section.json()["content"].strip() == "## Notes\n\nKeep it short."
    missing = client.get("/v1/files/wiki/ops/deploys.md", params={"section": "Nope"})
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"


def test_if_match_guards_against_lost_updates(client: httpx.Client, store_root: Path) -> None:
    etag = put(client, "notes/a.md", "# A\n\none\n").json()["etag"]
    second = put(client, "notes/a.md", "# A\n\ntwo\n", **{"If-Match": etag})
    assert second.status_code == 200 and second.json()["created"] is False
    stale = put(client, "notes/a.md", "# A\n\nthree\n", **{"If-Match": etag})
    assert stale.status_code == 412
    assert error_of(stale)["code"] == "precondition_failed"
    assert (store_root / "notes/a.md").read_text() == "# A\n\ntwo\n"


def test_if_match_takes_a_list_of_tags(client: httpx.Client, store_root: Path) -> None:
    first = put(client, "notes/a.md", "# A\n\none\n").json()["etag"]
    second = put(client, "notes/a.md", "# A\n\ntwo\n").json()["etag"]
    stale_list = put(client, "notes/a.md", "# A\n\nx\n", **{"If-Match": f'{first}, "0123456789"'})
    assert stale_list.status_code == 412
    fresh_list = put(client, "notes/a.md", "# A\n\nthree\n", **{"If-Match": f"{first}, {second}"})
    assert fresh_list.status_code == 200
    assert (store_root / "notes/a.md").read_text() == "# A\n\nthree\n"


@pytest.mark.parametrize("value", ["nocolon", ":id", "run:", "a :", ":"])
def test_malformed_provenance_is_400_and_writes_nothing(
    client: httpx.Client, store_root: Path, value: str
) -> None:
    response = put(client, "notes/p.md", "# P\n", **{"X-Provenance": value})
    assert response.status_code == 400
    err = error_of(response)
    assert err["code"] == "invalid_provenance"
    assert "X-Provenance" in err["message"] and "type:id" in err["message"]
    assert not (store_root / "notes/p.md").exists()


def test_malformed_actor_is_400(client: httpx.Client, store_root: Path) -> None:
    response = put(client, "notes/p.md", "# P\n", **{"X-Actor": "x" * 300})
    assert response.status_code == 400
    assert "X-Actor" in error_of(response)["message"]
    assert not (store_root / "notes/p.md").exists()


def test_malformed_json_and_wrong_shapes_are_400(client: httpx.Client) -> None:
    bad = client.put(
        "/v1/files/notes/j.md",
        content=b'{"content": ',
        headers={"content-type": "application/json"},
    )
    assert bad.status_code == 400
    assert error_of(bad)["code"] == "malformed_json"
    assert error_of(bad)["message"].startswith("malformed JSON body")
    wrong = client.put("/v1/files/notes/j.md", json={"content": 5})
    assert wrong.status_code == 400 and "content" in error_of(wrong)["message"]
    missing = client.post("/v1/turns", json={"input": "no thread"})
    assert missing.status_code == 400 and "thread" in error_of(missing)["message"]


def test_body_over_the_limit_is_413(client: httpx.Client, store_root: Path) -> None:
    big = put(client, "notes/big.md", "x" * 10_000)
    assert big.status_code == 413 and error_of(big)["code"] == "too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
        yield b'{"content": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    streamed = client.put(
        "/v1/files/notes/big.md", content=chunks(), headers={"content-type": "application/json"}
    )
    assert streamed.status_code == 413 and error_of(streamed)["code"] == "too_large"
    assert not (store_root / "notes/big.md").exists()


@pytest.mark.parametrize(
    "path",
    [
        "..%2F..%2Fescape.md",
        "notes/..%2F..%2Fescape.md",
        ".memdir/config.toml",
        ".git/HEAD",
        "%2Fetc%2Fx.md",
    ],
)
def test_path_escapes_are_refused(client: httpx.Client, store_root: Path, path: str) -> None:
    before = (store_root / ".memdir/config.toml").read_text()
    response = client.put(f"/v1/files/{path}", json={"content": "# pwned\n"})
    assert response.status_code == 400, response.text
    assert error_of(response)["code"] == "unsafe_path"
    assert client.get(f"/v1/files/{path}").status_code == 400
    assert not (store_root.parent / "escape.md").exists()
    assert (store_root / ".memdir/config.toml").read_text() == before


def test_symlink_out_of_the_store_is_refused(client: httpx.Client, store_root: Path) -> None:
    outside = store_root.parent / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# secret\n")
    (store_root / "link").symlink_to(outside)
    response = client.get("/v1/files/link/secret.md")
    assert response.status_code == 400 and error_of(response)["code"] == "unsafe_path"
    write = client.put("/v1/files/link/new.md", json={"content": "# x\n"})
    assert write.status_code == 400
    assert not (outside / "new.md").exists()


def test_search_grep_and_walk(client: httpx.Client) -> None:
    put(client, "wiki/ops/deploys.md", DOC)
    put(
        client,
        "episodes/e1.md",
        "---\nepisode_id: e1\n---\n# Incident\n\nThe deploy failed at noon.\n",
    )
    hits = client.get("/v1/search", params={"q": "blue-green switch"}).json()
    assert hits[0]["path"] == "wiki/ops/deploys.md"
    assert "content" not in hits[0] and "snippet" in hits[0]
    scoped = client.get("/v1/search", params={"q": "deploy", "path_prefix": "episodes/"}).json()
    assert [h["path"] for h in scoped] == ["episodes/e1.md"]
    lines = client.get("/v1/grep", params={"pattern": "fail(ed)?", "ignore_case": "true"}).json()
    assert lines == [{"path": "episodes/e1.md", "line": 6, "text": "The deploy failed at noon."}]
    bad = client.get("/v1/grep", params={"pattern": "(unclosed"})
    assert bad.status_code == 400 and error_of(bad)["code"] == "invalid_query"
    listed = [row["path"] for row in client.get("/v1/ls", params={"prefix": "wiki/"}).json()]
    assert listed == ["wiki/ops/deploys.md"]


def test_memory_report_matches_the_cli_and_pages(client: httpx.Client, store_root: Path) -> None:
    for n in range(5):
        put(client, f"episodes/ep-{n}.md", f"---\nepisode_id: ep-{n}\n---\n# Episode {n}\n")
    put(client, "wiki/page.md", "---\nmerged-from:\n  - type: run\n    id: ep-1\n---\n# Page\n")
    cli = run_cli("memory", "report", "--json", cwd=store_root)
    assert cli.returncode == 0, cli.stderr
    full = client.get("/v1/memory/report")
    assert full.status_code == 200
    data = full.json()
    expected = json.loads(cli.stdout)
    assert list(data) == list(expected)  # KiwiFS field order
    data_age, cli_age = data.pop("avg_age_days"), expected.pop("avg_age_days")
    assert data == expected and abs(data_age - cli_age) < 0.01
    data["avg_age_days"] = data_age
    assert list(data)[:3] == ["episodic_count", "total_episodic", "total_unmerged"]
    assert data["total_unmerged"] == 4 and len(data["unmerged"]) == 4

    kiwi = client.get("/api/kiwi/memory/report", params={"limit": "2", "offset": "1"}).json()
    assert [e["path"] for e in kiwi["episodic_files"]] == ["episodes/ep-1.md", "episodes/ep-2.md"]
    assert [e["path"] for e in kiwi["unmerged"]] == ["episodes/ep-2.md", "episodes/ep-3.md"]
    assert kiwi["total_episodic"] == 5 and kiwi["coverage_pct"] == data["coverage_pct"]
    past = client.get("/v1/memory/report", params={"limit": "3", "offset": "99"}).json()
    assert past["episodic_files"] == [] and past["unmerged"] == []
    for name, value in [("limit", "-1"), ("limit", "abc"), ("offset", "1.5"), ("offset", "-2")]:
        bad = client.get("/v1/memory/report", params={name: value})
        assert bad.status_code == 400
        assert error_of(bad)["message"] == f"{name} must be a non-negative integer"
    prefixed = client.get("/v1/memory/report", params={"episodes_prefix": "wiki"}).json()
    assert [e["path"] for e in prefixed["episodic_files"]] == ["wiki/page.md"]


def test_merge_and_forget(client: httpx.Client, store_root: Path) -> None:
    put(client, "episodes/ep-9.md", "---\nepisode_id: ep-9\n---\n# Nine\n\nzebra crossing\n")
    put(client, "wiki/z.md", "# Z\n")
    merged = client.post(
        "/v1/merge", json={"page": "wiki/z.md", "episode": "ep-9"}, headers={"X-Actor": "op"}
    )
    assert merged.status_code == 200 and merged.json()["added"] is True
    again = client.post("/v1/merge", json={"page": "wiki/z.md", "episode": "ep-9"})
    assert again.json()["added"] is False
    report = client.get("/v1/memory/report").json()
    assert report["total_unmerged"] == 0
    assert client.get("/v1/search", params={"q": "zebra"}).json()
    gone = client.post("/v1/forget", json={"path": "episodes/ep-9.md", "reason": "obsolete"})
    assert gone.status_code == 200 and gone.json()["memory_status"] == "superseded"
    assert client.get("/v1/search", params={"q": "zebra"}).json() == []
    assert (store_root / "episodes/ep-9.md").exists()
    bad = client.post("/v1/merge", json={"page": "wiki/z.md"})
    assert bad.status_code == 400 and "episode" in error_of(bad)["message"]


def test_turns_and_context(client: httpx.Client, store_root: Path) -> None:
    first = client.post(
        "/v1/turns",
        json={
            "thread": "t-1",
            "user": "ana",
            "input": "How do we roll back?",
            "output": "Use the blue-green switch.",
            "keywords": ["rollback"],
            "worklog": [{"tool": "search", "args": {"q": "rollback"}, "result": "deploys.md"}],
        },
        headers={"X-Provenance": "session:s1", "X-Actor": "agent-a"},
    )
    assert first.status_code == 201, first.text
    one = first.json()
    assert (store_root / one["path"]).exists()
    second = client.post(
        "/v1/turns",
        json={
            "thread": "t-1",
            "user": "ana",
            "input": "And after?",
            "output": "Verify.",
            "parents": [one["id"]],
        },
    ).json()
    shown = client.get(f"/v1/turns/{second['id']}").json()
    assert shown["parents"] == [one["id"]] and shown["output"] == "Verify."
    up = client.get(f"/v1/turns/{second['id']}/ancestors").json()
    assert [n["id"] for n in up] == [one["id"]]
    down = client.get(f"/v1/turns/{one['id']}/descendants").json()
    assert [n["id"] for n in down] == [second["id"]]
    log = client.get(f"/v1/turns/{one['id']}/worklog")
    assert json.loads(log.text.splitlines()[0])["tool"] == "search"
    thread = client.get("/v1/threads/t-1").json()
    assert [n["id"] for n in thread] == [second["id"], one["id"]]
    pack = client.post(
        "/v1/context", json={"thread": "t-1", "user": "ana", "keywords": ["rollback"]}
    )
    assert pack.status_code == 200
    body = pack.json()
    assert "And after?" in body["text"] and body["tokens"] <= body["budget"]
    assert any(item["ref"] == second["id"] for item in body["items"])
    unknown = client.post(
        "/v1/turns", json={"thread": "t-1", "input": "x", "parents": ["01zzzzzzzzzzzzzzzzzzzzzzzz"]}
    )
    assert unknown.status_code in (400, 404) and "error" in unknown.json()
    missing = client.get("/v1/turns/01aaaaaaaaaaaaaaaaaaaaaaaa")
    assert missing.status_code == 404


def test_routing_errors_share_the_shape(client: httpx.Client) -> None:
    assert error_of(client.get("/v1/nope"))["code"] == "not_found"
    wrong = client.delete("/v1/search")
    assert wrong.status_code == 405 and error_of(wrong)["code"] == "method_not_allowed"
    assert client.get("/v1/search").status_code == 400  # q missing


def test_openapi_describes_every_route(client: httpx.Client) -> None:
    doc = client.get("/openapi.json").json()
    paths = set(doc["paths"])
    for path in (
        "/v1/files/{path}",
        "/v1/search",
        "/v1/grep",
        "/v1/ls",
        "/v1/memory/report",
        "/api/kiwi/memory/report",
        "/v1/merge",
        "/v1/forget",
        "/v1/turns",
        "/v1/turns/{turn_id}/ancestors",
        "/v1/context",
        "/v1/health",
    ):
        assert path in paths, path
    params = {p["name"] for p in doc["paths"]["/v1/files/{path}"]["put"]["parameters"]}
    assert {"X-Provenance", "X-Actor", "If-Match"} <= params
    assert "HTTPBearer" in json.dumps(doc["components"]["securitySchemes"])


def test_the_docs_page_needs_no_network(client: httpx.Client) -> None:
    """/docs lists every operation of the schema from the server itself: no script, no
    address of another host, a policy that would block one anyway."""
    import re

    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    text = page.text
    assert "<script" not in text.lower()
    assert re.findall(r"(?:src|href)=\"(?!/)[^\"]*\"", text) == []  # only this server's
    doc = client.get("/openapi.json").json()
    for path, item in doc["paths"].items():
        for method in item:
            assert f"{method.upper()}</span> <code>{path}</code>" in text, (method, path)


def test_without_tokens_only_loopback_host_names(client: httpx.Client) -> None:
    refused = client.get("/v1/ls", headers={"Host": "attacker.example:3333"})
    assert refused.status_code == 403
    assert client.get("/v1/ls", headers={"Host": "localhost:3333"}).status_code == 200


def test_access_log_names_the_actor(client: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="memdir.access")
    put(client, "notes/log.md", "# L\n", **{"X-Actor": "night-shift"})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
        "night-shift" in r.message for r in caplog.records
    ):
        time.sleep(0.02)
    lines = [r.getMessage() for r in caplog.records if r.name == "memdir.access"]
    assert any(
        "actor=night-shift" in line and "PUT /v1/files/notes/log.md" in line and " 201 " in line
        for line in lines
    ), lines


def test_graceful_shutdown_finishes_the_write_in_flight(store_root: Path) -> None:
    results: list[object] = []
    with live_server(store_root, {"store": {"git_batch_seconds": 30}}) as live:
        store = Store(store_root, live.mem.settings)
        lock = store._lock  # the store's write lock, held so the write waits
        hold = threading.Event()
        release = threading.Event()

        def holder() -> None:
            with lock.hold():
                hold.set()
                release.wait(10)

        t = threading.Thread(target=holder)
        t.start()
        hold.wait(5)

        def writer() -> None:
            with live.client() as c:
                try:
                    results.append(put(c, "notes/inflight.md", "# In flight\n").status_code)
                except Exception as exc:
                    results.append(repr(exc))

        w = threading.Thread(target=writer)
        w.start()
        deadline = time.monotonic() + 10
        while not live.server.server_state.tasks and time.monotonic() < deadline:
            time.sleep(0.01)  # until the request is in flight
        time.sleep(0.1)
        live.server.should_exit = True  # shutdown starts while the write waits for the lock
        time.sleep(0.2)
        release.set()
        w.join(20)
        t.join(5)
    assert results == [201]
    assert (store_root / "notes/inflight.md").read_text() == "# In flight\n"
    # the batched git commit (30 s window) was written at shutdown
    log = subprocess.run(
        ["git", "-C", str(store_root), "log", "--format=%an %s", "--", "notes/inflight.md"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert log.stdout.strip() == "anonymous write notes/inflight.md"


def test_a_missing_field_called_path_is_named(live: Live) -> None:
    """The field's name was taken for the request part: forget without a path said "body"."""
    with live.client() as client:
        missing = client.post("/v1/forget", json={"reason": "old"})
        wrong = client.post("/v1/forget", json={"path": 5})
    assert missing.status_code == 400 and wrong.status_code == 400
    assert error_of(missing)["message"].startswith("path: ")
    assert error_of(wrong)["message"].startswith("path: ")


@pytest.mark.parametrize("kind", ["application/x-www-form-urlencoded", "text/plain", None])
def test_a_body_not_sent_as_json_is_415_naming_the_content_type(
    live: Live, store_root: Path, kind: str | None
) -> None:
    """`curl -d` without a JSON Content-Type: FastAPI does not parse it, and the answer was
    "Input should be a valid dictionary or object to extract fields from"."""
    body = json.dumps({"content": "# A\n"}).encode()
    headers = {"Content-Type": kind} if kind else {}
    with live.client() as client:
        response = client.put("/v1/files/notes/a.md", content=body, headers=headers)
    error = error_of(response)
    assert response.status_code == 415 and error["code"] == "unsupported_media_type"
    assert "application/json" in error["message"]
    assert (kind or "none") in error["message"]
    assert not (store_root / "notes/a.md").exists()


@pytest.mark.parametrize(("value", "name"), [([], "an array"), ("x", "a string"), (3, "a number")])
def test_a_json_body_that_is_not_an_object_says_so(live: Live, value: Any, name: str) -> None:
    with live.client() as client:
        response = client.put("/v1/files/notes/a.md", json=value)
    error = error_of(response)
    assert response.status_code == 400 and error["code"] == "invalid_input"
    assert "JSON object" in error["message"] and name in error["message"]


def test_a_missing_body_says_so(live: Live) -> None:
    with live.client() as client:
        response = client.post("/v1/turns", headers={"Content-Type": "application/json"})
    error = error_of(response)
    assert response.status_code == 400 and "body is missing" in error["message"]


def test_an_optional_body_may_still_be_empty(live: Live) -> None:
    """An empty body is not mislabelled: reindex takes none."""
    with live.client() as client:
        response = client.post(
            "/v1/reindex",
            content=b"",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
    assert response.status_code == 200, response.text


def test_wrong_method_names_every_method_the_path_takes(live: Live) -> None:
    """Starlette's 405 named only the first route's method: DELETE on a file said GET,
    though PUT writes it."""
    with live.client() as client:
        on_file = client.delete("/v1/files/notes/a.md")
        on_merge = client.get("/v1/merge")
    assert on_file.status_code == 405 and on_merge.status_code == 405
    assert error_of(on_file)["code"] == "method_not_allowed"
    assert {m.strip() for m in on_file.headers["allow"].split(",")} == {"GET", "PUT"}
    assert "GET" in error_of(on_file)["message"] and "PUT" in error_of(on_file)["message"]
    assert "DELETE" in error_of(on_file)["message"]
    assert on_merge.headers["allow"] == "POST" and "POST" in error_of(on_merge)["message"]


def test_access_log_names_the_actor_the_write_records(
    live: Live, store_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Without X-Actor and without tokens the log said actor=local while the file and the
    git commit said anonymous."""
    caplog.set_level(logging.INFO, logger="memdir.access")
    with live.client() as client:
        written = client.put(
            "/v1/files/notes/who.md", json={"content": "# W\n"}, headers={"X-Provenance": "run:1"}
        )
    assert written.status_code == 201
    deadline = time.monotonic() + 5
    lines: list[str] = []
    while time.monotonic() < deadline and not lines:
        lines = [
            r.getMessage()
            for r in caplog.records
            if r.name == "memdir.access" and "PUT /v1/files/notes/who.md" in r.getMessage()
        ]
        time.sleep(0.02)
    recorded = live.mem.read("notes/who.md").content
    actor = recorded.split("actor:", 1)[1].split()[0]
    assert lines and f"actor={actor} " in lines[0], (lines, recorded)


def test_utf8_actor_and_provenance_headers_are_recorded_as_sent(
    live: Live, store_root: Path
) -> None:
    """Header values reached memdir decoded as Latin-1: X-Actor: José was recorded as
    JosÃ© in derived-from and as the git author."""
    actor, origin = "José", "run:ñandú-1"
    headers = [(b"X-Actor", actor.encode()), (b"X-Provenance", origin.encode())]
    with live.client() as client:
        written = client.put("/v1/files/notes/u.md", json={"content": "# U\n"}, headers=headers)
        assert written.status_code == 201, written.text
        entry = client.get("/v1/files/notes/u.md").json()["content"]
    cli = run_cli(
        "--root", str(store_root), "write", "notes/v.md", "--text", "# V\n",
        "--actor", actor, "--provenance", origin,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    by_cli = (store_root / "notes/v.md").read_text()

    def derived(text: str) -> list[str]:
        return [
            line.strip() for line in text.splitlines() if line.strip().startswith(("id:", "actor:"))
        ]

    assert derived(entry) == derived(by_cli) and actor in entry
