"""A short run of the fault suite (bench/faults.py): one round of each kind, checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FAULTS = Path(__file__).resolve().parent.parent / "bench" / "faults.py"


def test_one_round_of_each_fault_loses_nothing_and_leaves_no_purged_text(
    tmp_path: Path,
) -> None:
    args = ["--rounds", "1", "--writers", "2", "--server-kills", "1", "--clients", "3"]
    args += ["--seconds", "1", "--consolidate-kills", "1", "--git-locks", "1"]
    args += ["--reindex-kills", "1", "--reindex-reads", "1", "--readers", "2"]
    args += ["--reindex-docs", "300"]
    env = dict(os.environ)
    env.pop("MEMDIR_ROOT", None)
    done = subprocess.run(
        [sys.executable, str(FAULTS), *args, "--root", str(tmp_path), "--json"],
        capture_output=True,
        env=env,
        timeout=300,
        check=False,
    )
    out = json.loads(done.stdout)
    kinds = ["writers", "server", "consolidate", "git-lock", "reindex-kill", "reindex-reads"]
    assert [r["kind"] for r in out["rounds"]] == kinds
    # A failed round says why in its counts (lost, uncommitted, doctor, fsck...), not only in
    # its problems: show the whole of each.
    assert done.returncode == 0, [r for r in out["rounds"] if not r["ok"]]
    total = out["total"]
    assert total["acknowledged"] > 0 and total["present"] == total["acknowledged"]
    assert total["purged"] > 0
    assert (total["lost"], total["uncommitted"], total["purged_but_found"]) == (0, 0, 0)
    assert all(r["doctor_ok"] and r["fsck_ok"] for r in out["rounds"])
    # The readers got whole answers while the index was rebuilt under them.
    assert total["reads"] > 0 and total["rebuilds"] > 0 and total["read_errors"] == 0
