"""The ``memdir`` command line: a lazy click group, one module per command group.

Commands are imported only when run, so ``memdir --help`` stays fast. Each
entry of :data:`COMMANDS` is ``name: ("module:attribute", "one-line help")``.
MemdirError is translated here, once: ``error: <message>`` on stderr and the
error's exit code. A usage error (a bad flag or value) is shown the same way, on one
line, with exit code 2.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from ..errors import MemdirError

# click >= 8.2 shows the help of a group called without a command as an error; that stays.
_HELP_ERRORS: tuple[type[Exception], ...] = tuple(
    cls for cls in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if cls is not None
)

COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("memdir.cli.store:init_cmd", "Create a store (layout, config, harness, git)."),
    "write": ("memdir.cli.store:write_cmd", "Write a markdown file atomically, with provenance."),
    "read": ("memdir.cli.store:read_cmd", "Print a file, or one section of it."),
    "ls": ("memdir.cli.store:ls_cmd", "List visible documents in walk order."),
    "search": ("memdir.cli.search:search_cmd", "Search the store (pointers, never bodies)."),
    "grep": ("memdir.cli.search:grep_cmd", "Regular-expression search over visible files."),
    "memory": ("memdir.cli.memory:memory_group", "The KiwiFS-compatible memory coverage report."),
    "merge": ("memdir.cli.memory:merge_cmd", "Record that a page consumed an episode."),
    "forget": ("memdir.cli.memory:forget_cmd", "Supersede a document, or purge it."),
    "reindex": ("memdir.cli.store:reindex_cmd", "Bring the index in step, or rebuild it."),
    "doctor": ("memdir.cli.store:doctor_cmd", "Compare the index with the files."),
    "watch": ("memdir.cli.store:watch_cmd", "Keep the index in step as files change (Linux)."),
    "sync": ("memdir.cli.sync:sync_group", "Sync the store with a git remote; its conflicts."),
    "bundle": ("memdir.cli.engine:bundle_group", "Bundles: add, list, remove."),
    "ingest": ("memdir.cli.engine:ingest_cmd", "Place raw sources in inbox/ for consolidation."),
    "consolidate": ("memdir.cli.engine:consolidate_cmd", "Inbox sources to cited articles."),
    "quarantine": (
        "memdir.cli.engine:quarantine_group",
        "Sources no bundle took: list, release into a bundle.",
    ),
    "query": ("memdir.cli.engine:query_cmd", "Tiered recall: snapshot, index walk, search."),
    "refine": ("memdir.cli.engine:refine_cmd", "Audit drift and OKF conformance."),
    "evaluate": ("memdir.cli.engine:evaluate_cmd", "Run evals/questions.yaml: hit@k, MRR."),
    "reflect": ("memdir.cli.engine:reflect_cmd", "Lessons, distillation, SNAPSHOT.md."),
    "episode": ("memdir.cli.engine:episode_group", "Record life or signal episodes."),
    "harness": ("memdir.cli.engine:harness_group", "Accept a deliberate HARNESS.md change."),
    "serve": ("memdir.http.command:serve_cmd", "Serve the HTTP API and MCP over HTTP (/mcp)."),
    "mcp": ("memdir.mcp.command:mcp_cmd", "Serve MCP over stdio for agent clients."),
    "token": ("memdir.cli.server:token_group", "Create, list and revoke bearer tokens."),
    "store": ("memdir.cli.stores:store_group", "The stores of a server of many stores."),
    "turn": ("memdir.cli.turns:turn_group", "Turn records and their DAG."),
    "context": ("memdir.cli.turns:context_cmd", "Mode one: the context pack for a turn."),
    "hook": ("memdir.cli.agents:hook_cmd", "Handle an agent's hook event (Claude Code, Codex)."),
    "import": ("memdir.cli.agents:import_cmd", "Record the turns of an agent's past sessions."),
    "agent": ("memdir.cli.agents:agent_group", "Wire memdir into Claude Code or Codex."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, _, attr = entry[0].partition(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            _usage_error(ctx, exc)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MemdirError as exc:
            click.echo(f"error: {exc.message}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:
            _usage_error(ctx, exc)
            raise


def _usage_error(ctx: click.Context, exc: click.UsageError) -> None:
    """Print a usage error as one line ``error: ...`` and exit 2 (the help of a bare group
    is left to click)."""
    if isinstance(exc, _HELP_ERRORS):
        return
    message = " ".join(exc.format_message().split())
    command = (exc.ctx or ctx).command_path
    click.echo(f"error: {message} (see '{command} --help')", err=True)
    ctx.exit(exc.exit_code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--root",
    "root",
    type=click.Path(file_okay=False),
    envvar="MEMDIR_ROOT",
    help="The store (default: found by walking up from the current folder).",
)
@click.version_option(package_name="memdir")
@click.pass_context
def cli(ctx: click.Context, root: str | None) -> None:
    """memdir: memory for AI agents in a plain folder of markdown files.

    Files are the truth; the index under .memdir/ is derived and rebuildable.
    Run `memdir COMMAND --help` for each command's options and an example.
    """
    ctx.obj = {"root": root}


def main() -> None:
    cli(prog_name="memdir")


if __name__ == "__main__":  # pragma: no cover
    main()
