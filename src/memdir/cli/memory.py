"""Memory commands: the coverage report, merge, forget."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from ..errors import StoreNotFound
from .common import echo_json, memory, root_flag, root_option


@click.group("memory")
def memory_group() -> None:
    """The KiwiFS-compatible memory model: coverage of episodes by pages.

    Example: memdir memory report --json --fail-under 90
    """


@memory_group.command("report")
@root_flag
@click.option("--json", "as_json", is_flag=True, help="Print the KiwiFS JSON.")
@click.option("--episodes-prefix", help="Episodic path prefix (default from config: episodes/).")
@click.option(
    "--fail-under",
    type=click.FloatRange(0, 100),
    metavar="PCT",
    help="Exit 1 when coverage_pct is below PCT (a store with no episodic file passes).",
)
@click.pass_context
def report_cmd(
    ctx: click.Context,
    root: str | None,
    as_json: bool,
    episodes_prefix: str | None,
    fail_under: float | None,
) -> None:
    """Which episodes no page's merged-from references yet (exactly as KiwiFS reports).

    Works on a memdir store (served from the index) or on any folder of
    markdown (a plain walk that writes nothing). Warnings go to stderr.

    Example: memdir memory report --json --fail-under 90
    """
    from ..files.layout import find_root, is_store
    from ..kiwi import report as coverage

    chosen = root_option(ctx, root)
    folder: Path | None = None
    if chosen is not None:
        path = Path(chosen).expanduser()
        if not path.is_dir():
            raise StoreNotFound(f"root does not exist: {chosen}")
        if not is_store(path.resolve()):
            folder = path.resolve()
    else:
        try:
            find_root()
        except StoreNotFound:
            folder = Path.cwd()
    # With no episodic file coverage_pct is 0 (as KiwiFS reports it) though nothing is left
    # unmerged: --fail-under has nothing to fail on. None: read from the JSON if needed.
    episodes: int | None
    if folder is not None:
        report = coverage.report_for_folder(folder, prefix=episodes_prefix)
        text = coverage.dumps_report(report) if as_json else coverage.render_text(report)
        pct, warnings, episodes = report.coverage_pct, report.warnings, report.total_episodic
    else:
        with memory(ctx, chosen) as mem:
            if as_json:  # served as cached text: no parsing, no encoding
                cached = mem.memory_report_text(episodes_prefix=episodes_prefix)
                text, pct, warnings = cached.json, cached.coverage_pct, cached.warnings
                episodes = None
            else:
                report = mem.memory_report(episodes_prefix=episodes_prefix)
                text = coverage.render_text(report)
                pct, warnings = report.coverage_pct, report.warnings
                episodes = report.total_episodic
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        sys.stdout.write(text + "\n")
    else:
        click.echo(text, nl=False)
    if fail_under is None or pct >= fail_under:
        return
    if episodes is None:
        episodes = int(json.loads(text)["total_episodic"])
    if episodes:
        click.echo(
            f"error: coverage {pct:.1f}% is below --fail-under {fail_under:g}%",
            err=True,
        )
        ctx.exit(1)


@click.command("merge")
@click.argument("page")
@click.option("--episode", help="The episode id the page consumed.")
@click.option("--type", "type_", default="episode", show_default=True, help="Episode type.")
@click.option("--path", "ep_path", help="The episode's path (a path entry).")
@click.option("--note", help="A note kept in the entry.")
@click.option("--actor", help="Who records the merge.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def merge_cmd(
    ctx: click.Context,
    page: str,
    episode: str | None,
    type_: str,
    ep_path: str | None,
    note: str | None,
    actor: str | None,
    as_json: bool,
    root: str | None,
) -> None:
    """Record in PAGE's merged-from that it consumed an episode (idempotent).

    Example: memdir merge wiki/ops/deploys.md --episode ep-0042 --type run
    """
    with memory(ctx, root) as mem:
        result = mem.merge(page, episode=episode, type=type_, path=ep_path, note=note, actor=actor)
    if as_json:
        echo_json(result)
    elif result["added"]:
        click.echo(f"recorded {result['key']} in {result['page']}")
    else:
        click.echo(f"{result['page']} already records {result['key']}")


@click.command("forget")
@click.argument("path")
@click.option("--reason", help="Why it is forgotten (kept in the frontmatter).")
@click.option("--purge", is_flag=True, help="Delete the file and every index row instead.")
@click.option("--actor", help="Who forgets it.")
@root_flag
@click.pass_context
def forget_cmd(
    ctx: click.Context,
    path: str,
    reason: str | None,
    purge: bool,
    actor: str | None,
    root: str | None,
) -> None:
    """Supersede PATH (kept on disk, hidden from every retrieval path), or --purge it.

    Example: memdir forget wiki/ops/old-deploys.md --reason "replaced by the runbook"
    """
    with memory(ctx, root) as mem:
        result = mem.forget(path, reason=reason, purge=purge, actor=actor)
    if result["purged"]:
        click.echo(f"purged {result['path']}")
    else:
        since = "already superseded" if result["already"] else "superseded"
        click.echo(f"{since} {result['path']} (valid_until {result['valid_until']})")
