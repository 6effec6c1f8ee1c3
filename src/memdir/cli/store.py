"""Store commands: init, write, read, ls, reindex, doctor."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import InvalidInput
from .common import echo_json, memory, read_input, root_flag, root_option


@click.command("init")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option(
    "--force", is_flag=True, help="Add missing parts to an existing store; never clobbers."
)
@click.option(
    "--root",
    "root",
    type=click.Path(file_okay=False),
    default=None,
    help="The folder to create the store in, as DIRECTORY.",
)
@click.pass_context
def init_cmd(ctx: click.Context, directory: str | None, force: bool, root: str | None) -> None:
    """Create a store in DIRECTORY (default: --root, MEMDIR_ROOT, else the current folder).

    Writes .memdir/config.toml, HARNESS.md, PROGRAM.md, index.md, the folders of
    the layout and a .gitignore for derived files, and makes a git repository
    with a first commit. Refuses an existing store unless --force, and a folder
    inside another store (that store would refuse every write under it).

    Example: memdir init ~/agent-memory
    """
    from ..service import Memory

    if directory and root and Path(directory).expanduser() != Path(root).expanduser():
        raise click.UsageError(f"DIRECTORY {directory} and --root {root} name different folders")
    target = Path(directory or root_option(ctx, root) or ".").expanduser()
    with Memory.init(target, force=force) as mem:
        mem.sync()
        created = mem.root
    click.echo(f"initialised memdir store in {created}")


@click.command("write")
@click.argument("path")
@click.option(
    "--file", "file_", type=click.Path(dir_okay=False), help="Read the content from this file."
)
@click.option("--text", help="Use this text as the content.")
@click.option("--provenance", help="Append {type, id, date, actor} to derived-from (type:id).")
@click.option("--actor", help="Who is writing (git author; default anonymous).")
@click.option("--message", "-m", help="Git commit message.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@root_flag
@click.pass_context
def write_cmd(
    ctx: click.Context,
    path: str,
    file_: str | None,
    text: str | None,
    provenance: str | None,
    actor: str | None,
    message: str | None,
    as_json: bool,
    root: str | None,
) -> None:
    """Write PATH (store-relative, .md) from --file, --text or stdin, atomically.

    Example: echo '# Note' | memdir write notes/a.md --provenance run:42 --actor planner
    """
    if file_ is not None and text is not None:
        raise InvalidInput("give either --file or --text, not both")
    if file_ is None and text is None and sys.stdin.isatty():
        raise InvalidInput("no content: give --file F, --text T or pipe it on stdin")
    with memory(ctx, root) as mem:
        if text is not None:
            content: str | bytes = text
        elif file_ is not None:
            content = read_input(mem, file_, label=f"--file {file_}")
        else:
            content = read_input(mem, None)
            if not content:
                raise InvalidInput(
                    "no content on stdin (nothing was piped); to write an empty file use --text ''"
                )
        result = mem.write(path, content, provenance=provenance, actor=actor, message=message)
    if as_json:
        echo_json(
            {
                "path": result.path,
                "hash": result.hash,
                "etag": result.etag,
                "size": result.size,
                "created": result.created,
                "replaced": list(result.replaced),
            }
        )
    else:
        click.echo(
            f"{'created' if result.created else 'updated'} {result.path} ({result.size} bytes)"
        )
    if result.replaced:
        keys = ", ".join(result.replaced)
        click.echo(f"note: the content set {keys}, replacing the file's earlier entries", err=True)


@click.command("read")
@click.argument("path")
@click.option("--section", help="Print only the section under this heading.")
@root_flag
@click.pass_context
def read_cmd(ctx: click.Context, path: str, section: str | None, root: str | None) -> None:
    """Print the file at PATH, or one --section of it.

    Example: memdir read wiki/ops/deploys/rollback.md --section "Key points"
    """
    with memory(ctx, root) as mem:
        result = mem.read(path, section=section)
    click.echo(result.content, nl=not result.content.endswith("\n"))


@click.command("ls")
@click.argument("prefix", required=False)
@click.option("--include-superseded", is_flag=True, help="Also list superseded documents.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def ls_cmd(
    ctx: click.Context,
    prefix: str | None,
    include_superseded: bool,
    as_json: bool,
    root: str | None,
) -> None:
    """List visible documents (optionally under PREFIX) in walk order.

    Example: memdir ls episodes/
    """
    with memory(ctx, root) as mem:
        rows = mem.ls(prefix, include_superseded=include_superseded)
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        click.echo(f"{row['path']}\t{row['title']}")


@click.command("reindex")
@click.option("--full", is_flag=True, help="Drop the index and rebuild it from the files.")
@click.option(
    "--vectors",
    is_flag=True,
    help="Also drop every vector and re-embed with the configured model (after a model switch).",
)
@root_flag
@click.pass_context
def reindex_cmd(ctx: click.Context, full: bool, vectors: bool, root: str | None) -> None:
    """Bring the index in step with the files (or rebuild it with --full).

    With --vectors, re-embed everything with the configured model, with a progress counter.

    Example: memdir reindex --full; memdir reindex --vectors
    """
    from .common import ProgressPrinter

    with memory(ctx, root, sync=False) as mem:
        stats = mem.reindex(full=full)
        click.echo(
            f"scanned {stats.scanned}, added {stats.added}, updated {stats.updated}, "
            f"removed {stats.removed} in {stats.seconds:.2f}s"
        )
        if vectors:
            done = mem.embed(progress=ProgressPrinter("embedding", min_total=1), rebuild=True)
            click.echo(
                f"embedded {done.embedded} chunks of {done.documents} documents "
                f"({done.cache_hits} cached) in {done.seconds:.2f}s"
            )


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def doctor_cmd(ctx: click.Context, as_json: bool, root: str | None) -> None:
    """Compare the index with the files; exit 1 on any difference.

    Also lists files whose frontmatter is not valid YAML or that are not UTF-8
    (reported, not counted as differences). Changes nothing.

    Example: memdir doctor
    """
    with memory(ctx, root, sync=False) as mem:
        report = mem.doctor()
    data = report.to_dict()
    if as_json:
        echo_json(data)
    else:
        for label in ("missing_in_index", "missing_on_disk", "stale"):
            for rel in data[label]:
                click.echo(f"{label.replace('_', ' ')}: {rel}")
        if data["fts_rows"] != data["doc_rows"]:
            click.echo(f"full-text rows {data['fts_rows']} != document rows {data['doc_rows']}")
        for item in data["invalid_yaml"]:
            click.echo(f"invalid YAML frontmatter: {item['path']}: {item['error']}")
        for rel in data["invalid_utf8"]:
            click.echo(f"not UTF-8: {rel}")
        if report.ok:
            click.echo("index in step with the files")
        else:
            click.echo("index differs from the files: `memdir reindex` brings it in step")
    if not report.ok:
        ctx.exit(1)


@click.command("watch")
@click.option("--quiet", is_flag=True, help="Print nothing but errors.")
@root_flag
@click.pass_context
def watch_cmd(ctx: click.Context, quiet: bool, root: str | None) -> None:
    """Keep the index in step as files change, until interrupted (Linux).

    While it runs, other commands ask it instead of statting every file: an edit
    made by hand reaches the index in milliseconds. `memdir serve` and `memdir mcp`
    run the same watcher themselves.

    Example: memdir watch &
    """
    import signal

    from ..index.watch import Watcher

    with memory(ctx, root, sync=False) as mem:
        watcher = Watcher(mem.store.root, mem.index)
        stats = watcher.start()
        signal.signal(signal.SIGTERM, lambda *_: watcher.stop())
        if not quiet:
            click.echo(
                f"watching {mem.store.root} ({len(watcher.folders)} folders; "
                f"sync: {stats.changed} changed in {stats.seconds:.2f}s); Ctrl-C stops",
                err=True,
            )
        try:
            watcher.run()
        except KeyboardInterrupt:
            pass
        finally:
            watcher.close()
