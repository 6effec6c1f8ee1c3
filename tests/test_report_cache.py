"""The memory report served from the index cache equals the plain walk, at any time."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memdir.kiwi import report as coverage
from memdir.service import Memory

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def fill(root: Path) -> None:
    files = {
        "episodes/a.md": "---\nepisode_id: a\nexpires_at: 2026-05-01\n---\nA\n",
        "episodes/b.md": "---\nepisode_id: b\nexpires_at: 2026-07-01\n---\nB\n",
        "episodes/c.md": "---\nmemory_kind: episodic\n---\nno id\n",
        "wiki/p.md": "---\nmemory_kind: semantic\nscope: team\nmerged-from:\n"
        "  - type: run\n    id: a\n---\nP\n",
        "wiki/q.md": "---\nmemory_status: contested\nmerged-from: oops\n---\nQ\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def as_json(report: coverage.Report) -> str:
    return coverage.dumps_report(report)


def test_cached_report_matches_the_plain_walk_and_tracks_time(tmp_path: Path) -> None:
    mem = Memory.init(tmp_path / "s")
    root = mem.root
    fill(root)
    try:
        for when in (NOW, NOW + timedelta(days=45), NOW - timedelta(days=400)):
            first = mem.memory_report(now=when)
            again = mem.memory_report(now=when)  # from the cache
            walked = coverage.report_for_folder(root, prefix="episodes/", now=when)
            assert as_json(first) == as_json(walked)
            assert as_json(again) == as_json(walked)
            text = mem.memory_report_text(now=when)  # what `memory report --json` prints
            assert text.json == as_json(walked)
            assert (text.coverage_pct, text.warnings) == (walked.coverage_pct, walked.warnings)
        assert mem.index.meta("memory_report:episodes/") is not None
        assert mem.memory_report(now=NOW + timedelta(days=45)).expired_count == 2
        assert mem.memory_report(now=NOW).expired_count == 1

        # A touch (same bytes, new mtime) changes avg_age_days in the walk: so in the index.
        old = (root / "wiki/p.md").stat().st_mtime_ns
        os.utime(root / "wiki/p.md", ns=(old - 10**9 * 86400 * 30, old - 10**9 * 86400 * 30))
        touched = mem.memory_report(now=NOW)
        assert as_json(touched) == as_json(coverage.report_for_folder(root, now=NOW))

        # A content change is picked up (the cache is keyed on the index generation).
        (root / "wiki/p.md").write_text(
            "---\nmerged-from:\n  - type: run\n    id: b\n---\nP\n", encoding="utf-8"
        )
        changed = mem.memory_report(now=NOW)
        assert as_json(changed) == as_json(coverage.report_for_folder(root, now=NOW))
        assert [e.path for e in changed.unmerged] == ["episodes/a.md", "episodes/c.md"]
        other = mem.memory_report(episodes_prefix="wiki", now=NOW)
        assert as_json(other) == as_json(coverage.report_for_folder(root, "wiki/", NOW))
    finally:
        mem.close()
