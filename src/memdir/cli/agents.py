"""Agent commands: ``memdir hook AGENT EVENT``."""

from __future__ import annotations

import sys

import click

from .common import root_flag, root_option

# What a hook reads of stdin at most: an event is small; a runaway pipe is not an event.
_STDIN_LIMIT = 16 << 20


@click.command("hook", context_settings={"ignore_unknown_options": True})
@click.argument("agent")
@click.argument("event")
@click.option("--budget", type=int, default=None, help="Pack budget in tokens (default 1500).")
@root_flag
@click.pass_context
def hook_cmd(
    ctx: click.Context, agent: str, event: str, budget: int | None, root: str | None
) -> None:
    """Handle one hook event of an agent (claude-code, codex): the event's JSON on stdin.

    Answers on stdout in the agent's protocol (the context pack for SessionStart and
    UserPromptSubmit), records the finished turn on Stop. Always exits 0; a failure is one
    line in the store's .memdir/hooks.log, never output.

    Example: echo '{"session_id": "s1", "prompt": "deploy?", ...}' |
    memdir hook claude-code UserPromptSubmit
    """
    from ..agents.hooks import DEFAULT_BUDGET, run

    data = sys.stdin.buffer.read(_STDIN_LIMIT) if not sys.stdin.isatty() else b""
    size = budget if budget is not None and budget > 0 else DEFAULT_BUDGET
    out = run(agent, event, data, root=root_option(ctx, root), budget=size)
    if out:
        click.echo(out)
