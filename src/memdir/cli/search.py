"""Search commands: search (bm25, vector or hybrid), grep (regex)."""

from __future__ import annotations

import click

from .common import echo_json, memory, root_flag


@click.command("search")
@click.argument("query")
@click.option(
    "--limit",
    type=int,
    default=None,
    help="How many results, 1-1000 (default search.default_limit: 10).",
)
@click.option("--path-prefix", help="Only paths starting with this prefix.")
@click.option("--kind", help="Only this memory_kind (episodic, semantic ...).")
@click.option("--type", "type_", help="Only this frontmatter type.")
@click.option("--where", multiple=True, help="Frontmatter filter key=value (repeatable).")
@click.option("--include-superseded", is_flag=True, help="Also return superseded documents.")
@click.option(
    "--include-worklog", is_flag=True, help="Also search turn work logs (listed after documents)."
)
@click.option(
    "--mode",
    type=click.Choice(["auto", "bm25", "vector", "hybrid"], case_sensitive=False),
    default=None,
    help="bm25, vector or hybrid (default auto: hybrid when vectors can be used, else bm25).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with `why`: rank per signal).")
@root_flag
@click.pass_context
def search_cmd(
    ctx: click.Context,
    query: str,
    limit: int | None,
    path_prefix: str | None,
    kind: str | None,
    type_: str | None,
    where: tuple[str, ...],
    include_superseded: bool,
    include_worklog: bool,
    mode: str | None,
    as_json: bool,
    root: str | None,
) -> None:
    """Search for QUERY; prints pointers (path, title, snippet, score), never bodies.

    Any string with a word in it is a valid query: quotes, colons, AND, * and
    brackets are plain text. In auto mode, when vectors cannot be used (extra not
    installed, vectors of another model) the search runs on bm25 and says why on
    stderr. Embedding what is new shows a progress counter on stderr.

    Example: memdir search "deploy rollback" --kind semantic --limit 5 --mode hybrid
    """
    from .common import ProgressPrinter

    with memory(ctx, root) as mem:
        effective, note = mem.search_mode(mode)
        if note:
            click.echo(f"note: {note}", err=True)
        hits = mem.search(
            query,
            limit=limit,
            path_prefix=path_prefix,
            kind=kind,
            type=type_,
            where=list(where),
            include_superseded=include_superseded,
            mode=mode,
            progress=ProgressPrinter("embedding"),
            include_worklog=include_worklog,
        )
        if effective == "hybrid" and hits and not any("bm25_rank" in h.why for h in hits):
            # A nearest neighbour always exists: say when nothing matched a word (asked
            # for by --mode vector, the note would only repeat the mode).
            click.echo(
                "note: no result contains a word of the query; they are the nearest by "
                "meaning (see each hit's why.vector_score)",
                err=True,
            )
    if as_json:
        echo_json([hit.to_dict() for hit in hits])
        return
    if not hits:
        click.echo("no results")
    for hit in hits:
        click.echo(f"{hit.score:8.3f}  {hit.path}  {hit.title}")
        if hit.snippet:
            click.echo(f"          {hit.snippet}")


@click.command("grep")
@click.argument("pattern")
@click.option("--path-prefix", help="Only paths starting with this prefix.")
@click.option("-i", "--ignore-case", is_flag=True, help="Case-insensitive match.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Stop after N lines.",
)
@click.option("--include-superseded", is_flag=True, help="Also search superseded documents.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def grep_cmd(
    ctx: click.Context,
    pattern: str,
    path_prefix: str | None,
    ignore_case: bool,
    limit: int,
    include_superseded: bool,
    as_json: bool,
    root: str | None,
) -> None:
    """Print lines matching the regular expression PATTERN as path:line:text.

    Skips quarantine/, dot-folders and superseded documents, like search.

    Example: memdir grep -i "rollback|revert" --path-prefix wiki/
    """
    with memory(ctx, root) as mem:
        hits = mem.grep(
            pattern,
            path_prefix=path_prefix,
            ignore_case=ignore_case,
            limit=limit,
            include_superseded=include_superseded,
        )
    if as_json:
        echo_json([hit.to_dict() for hit in hits])
        return
    for hit in hits:
        click.echo(f"{hit.path}:{hit.line}:{hit.text}")
