"""A purge is final: after a kill -9 of the server that purged, no file of the store outside
git history holds the purged text, and reopening the store does not bring it back."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import httpx

from helpers import committed, files_holding, serve_process
from memdir.service import Memory

SECRET = "ZanzibarOctopusKey4471"


def test_a_purge_survives_a_kill_of_the_server_and_leaves_the_secret_nowhere(
    store_root: Path,
) -> None:
    proc, url = serve_process(store_root, store_root.parent / "serve.log")
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            turn = client.post(
                "/v1/turns",
                json={
                    "thread": "t1",
                    "input": f"store the key {SECRET}",
                    "output": f"stored {SECRET}",
                    "worklog": [{"tool": "vault", "args": {"key": SECRET}}],
                },
            )
            assert turn.status_code == 201, turn.text
            ident = turn.json()["id"]
            doc = client.put(
                "/v1/files/notes/key.md", json={"content": f"# Key\n\nThe key is {SECRET}.\n"}
            )
            assert doc.status_code == 201, doc.text
            for n in range(5):  # other writes around it, as a live store has
                body = {"content": f"# Note {n}\n\nNothing secret in note {n}.\n"}
                client.put(f"/v1/files/notes/n{n}.md", json=body).raise_for_status()
            assert client.get("/v1/search", params={"q": SECRET, "mode": "bm25"}).json()
            turn_rel = client.get(f"/v1/turns/{ident}").json()["path"]
            for rel in (turn_rel, "notes/key.md"):
                gone = client.post("/v1/forget", json={"path": rel, "purge": True})
                assert gone.status_code == 200, gone.text
                assert gone.json()["purged"] is True
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert files_holding(store_root, SECRET) == []
    with Memory.open(store_root) as mem:
        assert not (store_root / turn_rel).exists()
        assert not (store_root / "notes" / "key.md").exists()
        assert mem.search(SECRET, mode="bm25") == []
        assert mem.doctor().ok
    assert files_holding(store_root, SECRET) == []
    assert turn_rel not in committed(store_root) and "notes/key.md" not in committed(store_root)
    subjects = subprocess.run(
        ["git", "-C", str(store_root), "log", "--format=%s"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "journaled" not in subjects  # nothing was replayed
