"""What memdir refuses or repairs: inputs found by fuzzing the CLI and the HTTP API."""

from __future__ import annotations

from pathlib import Path

from conftest import run_cli
from memdir.service import Memory


def test_engine_writes_reach_the_index_within_the_command(store_root: Path) -> None:
    """A command syncs once when it starts; what the engine writes after must be indexed too."""
    source = store_root.parent / "src1.md"
    source.write_text("# Kettles\n\nDescale a kettle with vinegar.\n")
    ingested = run_cli("--root", str(store_root), "ingest", str(source))
    assert ingested.returncode == 0, ingested.stderr
    doctor = run_cli("--root", str(store_root), "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    with Memory.open(store_root) as mem:
        mem.sync_once()  # as a command does: no later walk
        mem.bundle_add("kitchen", "kettles, descaling")
        done = mem.consolidate()
        assert done["commit"]
        indexed = {r[0] for r in mem.index.conn.execute("SELECT path FROM docs")}
        on_disk = {
            p.relative_to(store_root).as_posix()
            for p in store_root.rglob("*.md")
            if not any(part.startswith(".") for part in p.relative_to(store_root).parts)
        }
        assert on_disk <= indexed, on_disk - indexed
    doctor = run_cli("--root", str(store_root), "doctor")
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
