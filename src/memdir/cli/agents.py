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
