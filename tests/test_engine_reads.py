"""What the engine reads from the folders it walks (inbox/, wiki/, the experience episodes):
only regular files of the store. A symlink out of the store or into .git/ or .memdir/ is
not a source (consolidate would copy what it points at into an article, committed and
served); a pipe is never opened (reading it blocks the run for ever)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from memdir.files.store import Store
from memdir.service import Memory

OFF = {"embeddings": {"enabled": False}}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    made = Store.init(tmp_path / "s")
    with Memory.open(made, overrides=OFF) as mem:
        mem.bundle_add("kitchen", "kettle, descale, kettles, vinegar")
    return made


def consolidate(root: Path, *verbs: str) -> subprocess.CompletedProcess[str]:
    """The real command, in a process of its own: a read that blocks fails the test (by the
    time limit) instead of holding the test run."""
    env = {**os.environ, "MEMDIR_EMBEDDINGS_ENABLED": "false"}
    env.pop("MEMDIR_ROOT", None)
    return subprocess.run(
        [sys.executable, "-m", "memdir", "--root", str(root), *(verbs or ("consolidate",))],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def store_text(root: Path) -> str:
    """Every markdown file memdir wrote, with the index, as one text."""
    files = [p for p in root.rglob("*.md") if p.is_file() and not p.is_symlink()]
    parts = [p.read_text(errors="replace") for p in files]
    parts.append((root / ".memdir" / "index.db").read_bytes().decode("latin-1"))
    return "\n".join(parts)


def test_a_symlinked_source_is_not_consolidated(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "notes.md"
    outside.write_text("# Kettle notes\n\nDescale the kettle; the zebrafish code is 4471.\n")
    (root / "inbox" / "out.md").symlink_to(outside)
    with (root / ".git" / "config").open("a") as handle:
        handle.write("# kettle descale kettle hunter2pass\n")
    (root / "inbox" / "cfg.md").symlink_to("../.git/config")
    (root / "inbox" / "real.md").write_text("# Kettles\n\nDescale a kettle with vinegar.\n")
    done = consolidate(root)
    assert done.returncode == 0, done.stderr
    articles = list((root / "wiki" / "kitchen").rglob("*.md"))
    assert any("vinegar" in p.read_text() for p in articles), articles  # the real source
    text = store_text(root)
    assert "zebrafish" not in text and "hunter2pass" not in text


@pytest.mark.parametrize(
    "folder", ["inbox", "wiki/kitchen", "wiki/kitchen/kettle", "episodes/operational"]
)
def test_a_pipe_in_a_folder_the_engine_walks_is_not_read(root: Path, folder: str) -> None:
    (root / "inbox" / "real.md").write_text("# Kettles\n\nDescale a kettle with vinegar.\n")
    (root / folder).mkdir(parents=True, exist_ok=True)
    os.mkfifo(root / folder / "pipe.md")
    done = consolidate(root)
    assert done.returncode == 0, done.stderr
    articles = [p for p in (root / "wiki" / "kitchen").rglob("*.md") if p.is_file()]
    assert any("vinegar" in p.read_text() for p in articles), articles
    refined = consolidate(root, "refine")
    assert refined.returncode == 0, refined.stderr
