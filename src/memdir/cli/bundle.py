"""Bundle commands that carry a bundle out of the store: publish, and the audit of a
published copy on its own."""

from __future__ import annotations

import click

from .common import echo_json, memory, root_flag


@click.command("publish")
@click.argument("name")
@click.option(
    "--to",
    "to",
    required=True,
    help="A folder (empty, or a previous publish of NAME), a bare repository or a git URL.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@root_flag
@click.pass_context
def publish_cmd(ctx: click.Context, name: str, to: str, as_json: bool, root: str | None) -> None:
    """Publish a bundle as a standalone OKF v0.2 git repository.

    The repository holds the bundle's files, the sources its articles cite and
    relations.json (its cross-bundle relations); its history is one commit per store
    commit that changed them, with the same author, date and message. Publishing again
    adds only the commits made since.

    Example: memdir bundle publish kitchen --to /srv/git/kitchen.git
    """
    with memory(ctx, root) as mem:
        result = mem.bundle_publish(name, to)
    if as_json:
        echo_json(result)
        return
    state = "updated" if result["incremental"] else "created"
    click.echo(
        f"{state} {result['to']}: {result['commits']} new commit(s), head "
        f"{result['head'][:12]}; {result['files']} file(s), {result['sources']} source(s), "
        f"{result['relations']} cross-bundle relation(s)"
    )


@click.command("audit")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
def audit_cmd(folder: str) -> None:
    """Check a published bundle (a clone) on its own: OKF v0.2 structure, and every
    citation, link and relation resolving inside it or declared in relations.json.

    Exits 1 when anything is wrong, printing one line per violation.

    Example: memdir bundle audit ./kitchen
    """
    from ..service import Memory

    problems = Memory.bundle_audit(folder)
    for line in problems:
        click.echo(line)
    if problems:
        raise SystemExit(1)
    click.echo(f"{folder}: conformant OKF v0.2, every reference resolves")
