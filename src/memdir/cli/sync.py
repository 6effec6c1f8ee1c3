"""``memdir sync``: the store with a git remote (docs/sync.md)."""

from __future__ import annotations

import contextlib
import signal
from typing import Any

import click

from .common import echo_json, memory, root_flag

as_json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _summary(report: dict[str, Any]) -> str:
    parts = [f"{report['remote']}/{report['branch']}:"]
    if report["resumed"]:
        parts.append("finished an interrupted sync;")
    if report["committed"]:
        parts.append("committed files changed outside memdir;")
    parts.append(f"{report['arrived']} commit(s) arrived, {len(report['touched'])} file(s) in step")
    if report["regenerated"]:
        parts.append(f"({len(report['regenerated'])} generated file(s) written again)")
    parts.append(f"; {report['pushed']} commit(s) pushed")
    if report["kept"]:
        parts.append(f"; {len(report['kept'])} file(s) changed on both sides kept")
    if report["conflicts"]:
        parts.append(f"; {report['conflicts']} open conflict(s): `memdir sync conflicts`")
    return " ".join(parts).replace(" ;", ";")


@click.group("sync", invoke_without_command=True)
@click.option("--remote", default="", help="The git remote (default: [sync] remote, origin).")
@click.option("--branch", default="", help="The remote branch (default: the one checked out).")
@click.option(
    "--watch",
    is_flag=True,
    help="Keep syncing: after each commit once quiet ([sync] debounce_seconds), and every "
    "[sync] interval_seconds; with --json, one report a line. Ctrl-C stops.",
)
@as_json_flag
@root_flag
@click.pass_context
def sync_group(
    ctx: click.Context, remote: str, branch: str, watch: bool, as_json: bool, root: str | None
) -> None:
    """Sync the store with a git remote: commit what is pending, fetch, integrate, push,
    then bring the index and the generated files in step.

    Turns and episodes never conflict; generated files are written again; a page changed
    on both sides keeps both versions (see `memdir sync conflicts`).

    Example: memdir sync --remote origin
    """
    if ctx.invoked_subcommand is not None:
        return
    with memory(ctx, root) as mem:
        if not watch:
            report = mem.git_sync(remote=remote, branch=branch)
            echo_json(report) if as_json else click.echo(_summary(report))
            return
        stopping: list[int] = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))

        def say(what: dict[str, Any] | Exception) -> None:
            if isinstance(what, Exception):
                click.echo(f"error: {what}", err=True)
            elif as_json:
                echo_json(what, line=True)  # one report a line while it runs
            else:
                click.echo(_summary(what))

        from ..engine import remote as remote_sync

        with contextlib.suppress(KeyboardInterrupt):
            remote_sync.watch(
                mem.engine, remote=remote, branch=branch, say=say, stop=lambda: bool(stopping)
            )


@sync_group.command("clone")
@click.argument("url")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--branch", default="", help="The branch to check out (default: the remote's).")
@as_json_flag
def clone_cmd(url: str, directory: str, branch: str, as_json: bool) -> None:
    """Clone a store from a git remote into DIRECTORY and build its index.

    Example: memdir sync clone ssh://host/srv/memory.git ~/memory
    """
    from ..engine import remote as remote_sync

    done = remote_sync.clone(url, directory, branch=branch)
    if as_json:
        echo_json(done)
    else:
        click.echo(f"{done['root']}: {done['documents']} document(s), branch {done['branch']}")


@sync_group.command("conflicts")
@as_json_flag
@root_flag
@click.pass_context
def conflicts_cmd(ctx: click.Context, as_json: bool, root: str | None) -> None:
    """List files changed on two machines that nobody resolved yet.

    Example: memdir sync conflicts
    """
    with memory(ctx, root) as mem:
        found = mem.sync_conflicts()
    if as_json:
        echo_json(found)
        return
    if not found:
        click.echo("no open conflicts")
    for c in found:
        other = c["copy"] or "(deleted)"
        click.echo(f"{c['path']}\t{c['kind']}\tother version: {other}\t{c['date']}")


@sync_group.command("resolve")
@click.argument("path")
@click.option(
    "--keep",
    type=click.Choice(["current", "other"]),
    required=True,
    help="current: the version at PATH now; other: the other side's (its copy, or its delete).",
)
@click.option("--actor", default="", help="Who resolves it (the commit's author).")
@as_json_flag
@root_flag
@click.pass_context
def resolve_cmd(
    ctx: click.Context, path: str, keep: str, actor: str, as_json: bool, root: str | None
) -> None:
    """End a conflict of PATH, keeping one version; one commit.

    Example: memdir sync resolve wiki/home/router.md --keep other
    """
    with memory(ctx, root) as mem:
        done = mem.resolve_conflict(path, keep=keep, actor=actor)
    if as_json:
        echo_json(done)
    else:
        click.echo(f"{done['path']}: kept the {done['kept']} version")
