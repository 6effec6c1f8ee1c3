"""What a new user meets following the docs: each test is a command the docs show, run as the
real `memdir` process on a real store, with what the docs say it does."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from helpers import memdir_script, run_cli


def test_init_takes_root_like_every_command(tmp_path: Path) -> None:
    target = tmp_path / "agent-memory"
    done = run_cli("init", "--root", str(target))
    assert done.returncode == 0, done.stderr
    assert (target / ".memdir" / "config.toml").is_file()
    assert (target / "HARNESS.md").is_file()


def test_init_refuses_a_directory_and_a_root_that_differ(tmp_path: Path) -> None:
    done = run_cli("init", str(tmp_path / "a"), "--root", str(tmp_path / "b"))
    assert done.returncode == 2
    assert done.stderr.decode().startswith("error: DIRECTORY ")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_write_help_names_no_placeholder_that_is_not_there() -> None:
    out = run_cli("write", "--help").stdout.decode()
    assert "Read the content from this file." in out
    assert "from F." not in out and "Use T " not in out


def test_episode_add_refuses_a_multi_line_situation_or_insight(store_root: Path) -> None:
    root = str(store_root)
    situation = run_cli(
        "--root", root, "episode", "add", "--kind", "signal",
        "--situation", "asked\n## Insights\n- a lesson nobody gave",
    )  # fmt: skip
    assert situation.returncode == 2
    assert "situation" in situation.stderr.decode()
    assert "control character" in situation.stderr.decode()
    insight = run_cli(
        "--root", root, "episode", "add", "--kind", "life",
        "--situation", "moved house", "--insight", "label boxes\n## Outcome",
    )  # fmt: skip
    assert insight.returncode == 2 and "insight" in insight.stderr.decode()
    assert not list((store_root / "episodes").rglob("signal-*.md"))
    assert not list((store_root / "episodes").rglob("life-*.md"))
    # One line each is still recorded, and its insight becomes a lesson.
    ok = run_cli(
        "--root", root, "episode", "add", "--kind", "signal",
        "--situation", "asked for metric", "--insight", "Use grams.",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert run_cli("--root", root, "reflect").returncode == 0
    lessons = (store_root / "LESSONS.md").read_text()
    assert "Use grams." in lessons and "nobody gave" not in lessons


def test_bundle_list_marks_a_removed_bundle_and_remove_twice_is_plain_not_found(
    store_root: Path,
) -> None:
    root = str(store_root)
    for name, scope in (("ops", "deploys, rollbacks"), ("cooking", "recipes, baking bread")):
        assert run_cli("--root", root, "bundle", "add", name, "--scope", scope).returncode == 0
    assert run_cli("--root", root, "bundle", "remove", "cooking").returncode == 0
    listed = run_cli("--root", root, "bundle", "list").stdout.decode().splitlines()
    assert "ops\t0 articles\tdeploys, rollbacks" in listed
    assert "cooking\t0 articles\t(not in PROGRAM.md)" in listed
    again = run_cli("--root", root, "bundle", "remove", "cooking")
    assert again.returncode == 1
    assert again.stderr.decode() == "error: no bundle named 'cooking' in PROGRAM.md\n"


def test_turn_thread_prints_no_depth_column(store_root: Path) -> None:
    root = str(store_root)
    first = run_cli(
        "--root", root, "turn", "record", "--thread", "t1", "--input", "a", "--output", "b"
    )
    parent = first.stdout.decode().strip()
    second = run_cli(
        "--root", root, "turn", "record", "--thread", "t1",
        "--input", "c", "--output", "d", "--parent", parent,
    )  # fmt: skip
    child = second.stdout.decode().strip()
    lines = run_cli("--root", root, "turn", "thread", "t1").stdout.decode().splitlines()
    assert [line.split()[0] for line in lines] == [child, parent]
    assert all("thread=t1" in line for line in lines)
    # A walk keeps its depth first.
    walked = run_cli("--root", root, "turn", "ancestors", child).stdout.decode().split()
    assert walked[:2] == ["1", parent]


def test_a_refused_apply_packet_lists_its_reasons_without_a_failed_run(
    store_root: Path, tmp_path: Path
) -> None:
    root = str(store_root)
    assert run_cli("--root", root, "bundle", "add", "ops", "--scope", "deploys").returncode == 0
    source = tmp_path / "rollback.md"
    source.write_text("# Rollback\n\nA failed deploy is rolled back with the blue switch.\n")
    assert run_cli("--root", root, "ingest", str(source)).returncode == 0
    plan = json.loads(run_cli("--root", root, "consolidate", "--plan").stdout)
    [item] = plan["items"]
    article = item["example_article"].replace("<RFC 3339 time>", "2026-01-01T00:00:00Z")
    article = re.sub(r" \[\^src-[a-z0-9]+\]", "", article.replace("<agent>", "planner"), count=1)
    packet = tmp_path / "articles.json"
    request = {k: item[k] for k in ("bundle", "topic")} | {"source": item["source"]["path"]}
    packet.write_text(json.dumps({"articles": [request | {"article": article}]}))
    head = subprocess.run(
        ["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout
    done = run_cli("--root", root, "consolidate", "--apply", str(packet))
    assert done.returncode == 2
    err = done.stderr.decode()
    assert err.startswith("error: refused, nothing filed:\n"), err
    assert "uncited claim in '## Key points'" in err and "put back" not in err
    assert not list((store_root / "wiki" / "ops").rglob("rollback*.md"))
    runs = store_root / ".memdir" / "runs.tsv"
    assert not runs.exists() or "consolidate" not in runs.read_text()
    assert (
        subprocess.run(
            ["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout
        == head
    )


def test_a_setting_with_choices_refuses_another_value_before_any_command(store_root: Path) -> None:
    from memdir import settings
    from memdir.doc import tokencount as tokens
    from memdir.retrieval.verbs import MODES

    assert settings.CHOICES[("search", "mode")] == MODES
    assert settings.CHOICES[("turns", "token_counter")] == tokens.COUNTER_NAMES
    root = str(store_root)
    env = run_cli("--root", root, "ls", env={"MEMDIR_SEARCH_MODE": "hybird"})
    assert env.returncode == 2
    assert env.stderr.decode() == (
        "error: environment: search.mode must be one of auto, bm25, vector, hybrid, got 'hybird'\n"
    )
    config = store_root / ".memdir" / "config.toml"
    config.write_text(config.read_text().replace("[turns]\n", '[turns]\ntoken_counter = "words"\n'))
    listed = run_cli("--root", root, "ls")
    assert listed.returncode == 2
    assert "turns.token_counter must be one of auto, tiktoken, bytes, got 'words'" in (
        listed.stderr.decode()
    )


def test_the_demo_refuses_an_existing_store_in_one_line(store_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memdir.demo", "--dir", str(store_root)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr == (
        f"error: {store_root} is already a memdir store; give --dir a new folder\n"
    )
    assert done.stdout == ""


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


def test_init_force_commits_only_what_it_adds(store_root: Path) -> None:
    _git(store_root, "rm", "-q", "PROGRAM.md", "inbox/.gitkeep")
    _git(store_root, "commit", "-q", "-m", "the owner removes PROGRAM.md")
    with (store_root / "HARNESS.md").open("a") as handle:
        handle.write("\nAn edit of the owner's, not committed yet.\n")
    (store_root / "notes").mkdir()
    (store_root / "notes" / "draft.md").write_text("# Draft\n")
    (store_root / ".gitignore").write_text(
        (store_root / ".gitignore").read_text() + "quarantine/\n"
    )
    (store_root / "quarantine" / ".gitkeep").unlink()
    _git(store_root, "add", ".gitignore")
    _git(store_root, "rm", "-q", "--cached", "quarantine/.gitkeep")
    _git(store_root, "commit", "-q", "-m", "the owner ignores quarantine/")
    done = run_cli("init", str(store_root), "--force")
    assert done.returncode == 0, done.stderr
    assert _git(store_root, "log", "-1", "--format=%s").strip() == "memdir init"
    changed = _git(store_root, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(changed) == ["PROGRAM.md", "inbox/.gitkeep"]
    status = _git(store_root, "status", "--porcelain").splitlines()
    assert " M HARNESS.md" in status and "?? notes/" in status


# The tour's lines that start servers or a watcher: they run until stopped.
LONG_RUNNING = ("memdir watch", "memdir serve", "memdir mcp")


def test_the_readme_tour_runs_as_written_in_a_fresh_store(tmp_path: Path) -> None:
    """Every command of the README's tour, in order, by bash, in a new home folder."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    tour = readme.split("## A short tour of the CLI", 1)[1].split("```sh\n", 1)[1]
    lines = [
        line for line in tour.split("\n```", 1)[0].splitlines()
        if not line.startswith(LONG_RUNNING)
    ]  # fmt: skip
    assert any(line.startswith("memdir init ~/agent-memory") for line in lines)
    bin_dir = memdir_script(tmp_path / "bin").parent
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home), "PATH": f"{bin_dir}:/usr/bin:/bin", "LANG": "C.UTF-8"}
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    out = done.stdout.decode()
    store = home / "agent-memory"
    assert "wiki/ops/deploys.md" in out  # search, grep
    assert "wiki/ops/rollback/rollback-drill.md" in out  # filed, then found by query
    assert "hit@1=1.0" in out  # evaluate answered the question the tour adds
    assert len(list((store / "episodes" / "turns").rglob("*.md"))) == 2
