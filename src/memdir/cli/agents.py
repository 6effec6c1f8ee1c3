"""Agent commands: ``memdir hook AGENT EVENT`` and ``memdir import claude-code|codex``."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click

from ..errors import InvalidInput
from .common import echo_json, root_flag, root_option

# What a hook reads of stdin at most: an event is small; a runaway pipe is not an event.
_STDIN_LIMIT = 16 << 20
_GIT_BATCH = 2.0  # seconds: an import commits its turns in batches


@click.command(
    "hook",
    options_metavar="",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument(
    "words", nargs=-1, type=click.UNPROCESSED, metavar="AGENT EVENT [--root DIR] [--budget N]"
)
@click.pass_context
def hook_cmd(ctx: click.Context, words: tuple[str, ...]) -> None:
    """Handle one hook event of an agent (claude-code, codex): the event's JSON on stdin.

    Answers on stdout in the agent's protocol (the context pack for SessionStart and
    UserPromptSubmit, within --budget tokens, default 1500), records the finished turn on
    Stop. Always exits 0, even for arguments it cannot use (an exit code 2 would block the
    prompt): a failure is one line in the store's .memdir/hooks.log, never output.

    Example: echo '{"session_id": "s1", "prompt": "deploy?", ...}' |
    memdir hook claude-code UserPromptSubmit
    """
    from ..agents.hooks import DEFAULT_BUDGET, run

    agent, event, root, budget, problems = _hook_words(words)
    data = sys.stdin.buffer.read(_STDIN_LIMIT) if not sys.stdin.isatty() else b""
    out = run(
        agent,
        event,
        data,
        root=root or root_option(ctx, None),
        budget=budget or DEFAULT_BUDGET,
        problems=problems,
    )
    if out:
        with contextlib.suppress(OSError):  # the agent stopped reading: nothing to tell it
            click.echo(out)


def _hook_words(words: tuple[str, ...]) -> tuple[str, str, str | None, int | None, list[str]]:
    """AGENT, EVENT, --root and --budget from the words, and what was wrong with them."""
    positional: list[str] = []
    root: str | None = None
    budget: int | None = None
    problems: list[str] = []
    items = iter(words)
    for word in items:
        name, eq, value = word.partition("=")
        if name in ("--root", "--budget"):
            value = value if eq else next(items, "")
            if name == "--root":
                root = value or None
            elif value.isdigit() and int(value) > 0:
                budget = int(value)
            else:
                problems.append(f"--budget must be a positive number of tokens, got {value!r}")
        elif word.startswith("-"):
            problems.append(f"unknown option {word}")
        else:
            positional.append(word)
    if len(positional) != 2:
        problems.append(f"expected AGENT EVENT, got {' '.join(positional) or 'nothing'}")
    agent, event = (positional + ["", ""])[:2]
    return agent, event, root, budget, problems


@click.command("import")
@click.argument("agent", type=click.Choice(["claude-code", "codex"]))
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Count what would be recorded; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@root_flag
@click.pass_context
def import_cmd(
    ctx: click.Context,
    agent: str,
    paths: tuple[Path, ...],
    dry_run: bool,
    as_json: bool,
    root: str | None,
) -> None:
    """Record the turns of an agent's past sessions (each once; again adds only new turns).

    PATHS are transcript files or folders (default ~/.claude/projects for claude-code,
    ~/.codex/sessions for codex). The store is chosen as for `memdir hook`.

    Example: memdir import claude-code --dry-run
    """
    from ..agents.hooks import user_of
    from ..agents.imports import default_paths, import_transcripts, transcript_files
    from ..agents.locate import locate
    from ..service import Memory

    files = transcript_files(list(paths) or default_paths(agent))
    if paths and not files:
        raise InvalidInput("no transcript (*.jsonl) in the paths given")
    store = locate(root_option(ctx, root), create=not dry_run)
    bar = click.progressbar(length=len(files), label=f"importing {agent}", file=sys.stderr)
    # Thousands of turns in a burst: they share git commits instead of one each.
    with Memory.open(store, overrides={"store": {"git_batch_seconds": _GIT_BATCH}}) as mem, bar:
        summary = import_transcripts(
            mem,
            agent,
            files,
            user=user_of(os.environ),
            dry_run=dry_run,
            each=lambda _path: bar.update(1),
        )
    if as_json:
        echo_json(summary.to_dict())
        return
    verb = "would add" if dry_run else "added"
    click.echo(
        f"{summary.sessions} sessions: {verb} {summary.turns_added} turns, "
        f"{summary.turns_present} already recorded, {len(summary.skipped)} skipped"
    )
    for item in summary.skipped:
        where = item["file"] + (f":{item['line']}" if "line" in item else "")
        what = f" turn {item['turn']}" if "turn" in item else ""
        click.echo(f"  skipped {where}{what}: {item['reason']}")


# -- memdir agent: wire memdir into an agent ------------------------------------------------

_AGENT = click.Choice(["claude-code", "codex"])
_memdir_flag = click.option(
    "--memdir",
    "memdir_cmd",
    metavar="CMD",
    default=None,
    help="The command that runs memdir in the agent (default: this install's absolute path).",
)
_store_flag = click.option(
    "--root",
    "store",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Pin the store (default: the hooks' rule, docs/agents.md).",
)


def _pinned(store: Path | None) -> Path | None:
    from ..files.layout import is_store

    if store is None:
        return None
    store = store.expanduser().absolute()
    if not is_store(store):
        raise InvalidInput(f"{store} is not a memdir store (create it with: memdir init {store})")
    return store


@click.group("agent")
def agent_group() -> None:
    """Wire memdir into Claude Code or Codex: install, uninstall, doctor (docs/agents.md).

    Example: memdir agent install claude-code && memdir agent doctor claude-code
    """


@agent_group.command("plugin")
@click.argument("agent", type=click.Choice(["claude-code"]))
@click.option(
    "--out", required=True, type=click.Path(file_okay=False, path_type=Path), help="The folder."
)
@_store_flag
@_memdir_flag
def plugin_cmd(agent: str, out: Path, store: Path | None, memdir_cmd: str | None) -> None:
    """Write the Claude Code plugin (hooks, MCP server, skill, commands) into --out.

    Example: memdir agent plugin claude-code --out ~/memdir-plugin && claude --plugin-dir
    ~/memdir-plugin
    """
    from ..agents import plugin
    from ..agents.wiring import memdir_command

    written = plugin.write(out, memdir_command(memdir_cmd), _pinned(store))
    for path in written:
        click.echo(str(path))


def _scope(project: Path | None, user: bool) -> Path | None:
    if project is not None and user:
        raise InvalidInput("give --project DIR or --user, not both")
    if project is None:
        return None
    project = project.expanduser().absolute()
    if not project.is_dir():
        raise InvalidInput(f"--project {project} is not a folder")
    return project


def _change(install: bool):  # type: ignore[no-untyped-def]
    verb = "install" if install else "uninstall"

    @click.argument("agent", type=_AGENT)
    @click.option(
        "--project",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="In this project's config (.claude/, .mcp.json, .codex/).",
    )
    @click.option("--user", is_flag=True, help="In the user's config (the default).")
    @click.option("--dry-run", is_flag=True, help="Print what would change; write nothing.")
    def command(
        agent: str,
        project: Path | None,
        user: bool,
        dry_run: bool,
        store: Path | None = None,
        memdir_cmd: str | None = None,
    ) -> None:
        from ..agents import install as installer
        from ..agents.wiring import memdir_command

        folder = _scope(project, user)
        memdir = memdir_command(memdir_cmd)
        root = _pinned(store) if install else None
        changes = installer.plan(agent, install, project=folder, memdir=memdir, root=root)
        for change in changes:
            click.echo(f"{'would ' if dry_run else ''}{change.action} {change.path}")
            if dry_run:
                click.echo(change.diff(), nl=False)
        if not changes:
            click.echo(f"nothing to {verb}: {agent} is {'already' if install else 'not'} wired")
        if dry_run:
            return
        paths = list(installer.places(agent, folder, os.environ).values())
        installer.apply(changes, install, forget=None if install else paths)

    return command


install_cmd = agent_group.command(
    "install",
    help=(
        "Wire memdir into AGENT: hooks, MCP server, skill and commands (idempotent).\n\n"
        "Only memdir's entries are added; `memdir agent uninstall` takes them out again.\n\n"
        "Example: memdir agent install claude-code --project ."
    ),
)(_store_flag(_memdir_flag(_change(True))))
uninstall_cmd = agent_group.command(
    "uninstall",
    help=(
        "Take memdir out of AGENT's config, leaving every other setting as it was.\n\n"
        "Example: memdir agent uninstall claude-code --project ."
    ),
)(_change(False))


@agent_group.command("mcp")
@_store_flag
@click.pass_context
def agent_mcp_cmd(ctx: click.Context, store: Path | None) -> None:
    """Serve MCP over stdio on the store the hooks use (what the plugin starts).

    Example: memdir agent mcp --root ~/agent-memory
    """
    from ..agents.locate import locate

    chosen = locate(str(store) if store else root_option(ctx, None))
    group = ctx.find_root().command
    assert isinstance(group, click.Group)
    server = group.get_command(ctx, "mcp")  # by name: no adapter imports another
    if server is None:
        raise InvalidInput("this memdir has no mcp command")
    ctx.invoke(server, root=str(chosen))


@agent_group.command("where")
@_store_flag
@click.pass_context
def where_cmd(ctx: click.Context, store: Path | None) -> None:
    """Print the store the hooks would use from here (creating the user store if needed).

    Example: memdir agent where
    """
    from ..agents.locate import locate

    click.echo(str(locate(str(store) if store else root_option(ctx, None))))


@agent_group.command("doctor")
@click.argument("agent", type=_AGENT)
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Check this project's config instead of the user's.",
)
def agent_doctor_cmd(agent: str, project: Path | None) -> None:
    """Check that memdir is wired into AGENT and works: its hooks and MCP server run for real.

    Exits 1 when a check fails. Example: memdir agent doctor claude-code
    """
    from ..agents.doctor import diagnose

    checks = diagnose(agent, _scope(project, False))
    for check in checks:
        click.echo(check.line())
    if not all(check.ok for check in checks):
        raise SystemExit(1)
