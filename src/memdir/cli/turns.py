"""Turn commands: ``memdir turn record|show|ancestors|descendants|thread``, ``memdir context``."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from ..errors import InvalidInput
from .common import echo_json, memory, read_input, root_flag

if TYPE_CHECKING:
    from ..service import Memory

# The keys of the JSON object on stdin, by the type each holds (null: not given).
_TEXT_KEYS = ("thread", "input", "output", "user", "channel", "provenance", "actor")
_LIST_KEYS = ("parents", "keywords")  # a list of strings, or one comma-separated string
_JSON_KEYS = {*_TEXT_KEYS, *_LIST_KEYS, "worklog"}
# Flags that bound a walk, with the HTTP API's limits (http/turn_routes.py).
_DEPTH = click.IntRange(1, 1000)
_LIMIT = click.IntRange(1, 100_000)
_LAST = click.IntRange(1, 10_000)


@click.group("turn")
def turn_group() -> None:
    """Turn records: one file per agent turn, linked to its parents (a DAG).

    Example: memdir turn record --thread support-1 --input "hi" --output "hello"
    """


def _read_stdin_object(mem: Memory) -> dict[str, Any]:
    if sys.stdin.isatty():
        raise InvalidInput("nothing to record: give --input/--output, or pipe one JSON object")
    raw = read_input(mem, None)
    if not raw.strip():
        raise InvalidInput("nothing to record: give --input/--output, or one JSON object on stdin")
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise InvalidInput(f"stdin is not a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidInput("stdin must hold one JSON object")
    unknown = sorted(set(value) - _JSON_KEYS)
    if unknown:
        raise InvalidInput(
            f"unknown key(s) in the JSON object: {', '.join(unknown)} "
            f"(known: {', '.join(sorted(_JSON_KEYS))})"
        )
    _check_types(value)
    return value


def _check_types(value: dict[str, Any]) -> None:
    """Each key of the JSON object holds its type (or null), before anything reads it."""
    for key in _TEXT_KEYS:
        item = value.get(key)
        if item is not None and not isinstance(item, str):
            raise InvalidInput(f"{key} must be a string, got {type(item).__name__}")
    for key in _LIST_KEYS:
        item = value.get(key)
        if item is None or isinstance(item, str):
            continue
        if not isinstance(item, list):
            raise InvalidInput(f"{key} must be a list of strings, got {type(item).__name__}")
        for entry in item:
            if not isinstance(entry, str):
                raise InvalidInput(
                    f"{key} must be a list of strings, got an item of type {type(entry).__name__}"
                )
    log = value.get("worklog")
    if log is not None and not isinstance(log, str | list):
        raise InvalidInput(
            f"worklog must be a list of JSON objects or JSON Lines text, got {type(log).__name__}"
        )


def _file_text(mem: Memory, path: str) -> str:
    try:
        return read_input(mem, path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from None


def _split(values: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for value in values:
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return out


@turn_group.command("record")
@click.option("--thread", help="Thread id (no path separators or control characters).")
@click.option("--user", help="User id.")
@click.option("--channel", help="Channel (cli, slack, api ...).")
@click.option("--input", "input_", help="What came in.")
@click.option("--input-file", type=click.Path(dir_okay=False), help="Read the input from a file.")
@click.option("--output", help="What went out.")
@click.option("--output-file", type=click.Path(dir_okay=False), help="Read the output from a file.")
@click.option(
    "--worklog",
    type=click.Path(dir_okay=False),
    help="Work log as a JSON Lines file (kept byte for byte).",
)
@click.option(
    "--parent",
    "parents",
    multiple=True,
    help="What the turn used: a turn id or a document path (repeatable).",
)
@click.option(
    "--keyword", "--keywords", "keywords", multiple=True, help="Keywords (repeatable or a,b)."
)
@click.option("--provenance", help="type:id recorded in derived-from.")
@click.option("--actor", help="Who records the turn (git author).")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@root_flag
@click.pass_context
def record_cmd(
    ctx: click.Context,
    thread: str | None,
    user: str | None,
    channel: str | None,
    input_: str | None,
    input_file: str | None,
    output: str | None,
    output_file: str | None,
    worklog: str | None,
    parents: tuple[str, ...],
    keywords: tuple[str, ...],
    provenance: str | None,
    actor: str | None,
    as_json: bool,
    root: str | None,
) -> None:
    """Record a turn from flags, or from one JSON object on stdin.

    Without --input/--output (or their -file forms) the turn is read from stdin
    as {"thread", "input", "output", "worklog": [...] or "JSONL text", "user",
    "channel", "parents", "keywords", "provenance", "actor"}; flags given too
    take precedence. Prints the new turn id.

    Example: memdir turn record --thread t1 --input "deploy?" --output "done"
    --worklog run.jsonl --parent 01jf... --keyword deploy
    """
    for flag, value, from_file in (("input", input_, input_file), ("output", output, output_file)):
        if value is not None and from_file is not None:
            raise InvalidInput(f"give either --{flag} or --{flag}-file, not both")
    with memory(ctx, root) as mem:
        data: dict[str, Any] = {}
        if input_ is None and output is None and input_file is None and output_file is None:
            data = _read_stdin_object(mem)
        if input_file is not None:
            input_ = _file_text(mem, input_file)
        if output_file is not None:
            output = _file_text(mem, output_file)
        log: Any = data.get("worklog")
        if worklog is not None:
            log = read_input(mem, worklog, label=f"the work log {worklog}")
        flags = {
            "thread": thread,
            "user": user,
            "channel": channel,
            "input": input_,
            "output": output,
            "provenance": provenance,
            "actor": actor,
        }
        for key, value in flags.items():
            if value is not None:
                data[key] = value
        if parents:
            data["parents"] = _split(parents)
        if keywords:
            data["keywords"] = _split(keywords)
        if data.get("thread") is None:
            raise InvalidInput('a turn needs a thread (--thread or "thread" in the JSON)')
        record = mem.record_turn(
            thread=data["thread"],
            input=data.get("input") or "",
            output=data.get("output") or "",
            worklog=log,
            user=data.get("user") or "",
            channel=data.get("channel") or "",
            parents=data.get("parents") or (),
            keywords=data.get("keywords") or (),
            provenance=data.get("provenance"),
            actor=data.get("actor"),
        )
    if as_json:
        echo_json(record.to_dict())
    else:
        click.echo(record.id)


@turn_group.command("show")
@click.argument("turn_id")
@click.option("--raw", is_flag=True, help="Print the raw work log exactly as recorded.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def show_cmd(ctx: click.Context, turn_id: str, raw: bool, as_json: bool, root: str | None) -> None:
    """Print a turn record, or with --raw its work log byte for byte.

    Example: memdir turn show 01jf3k... --raw > worklog.jsonl
    """
    with memory(ctx, root) as mem:
        if raw:
            data = mem.turn_worklog(turn_id)
            if not data:
                click.echo(f"note: turn {turn_id} was recorded without a work log", err=True)
            out = sys.stdout.buffer
            out.write(data)
            out.flush()
            return
        record = mem.turn_show(turn_id)
        if as_json:
            echo_json(record.to_dict())
            return
        click.echo(mem.store.read_text(record.path), nl=False)


def _print_nodes(nodes: list[Any], as_json: bool, *, depth: bool = True) -> None:
    """One line per turn; ``depth`` leads each line of a walk (a thread's turns have none)."""
    if as_json:
        echo_json([n.to_dict() for n in nodes])
        return
    if not nodes:
        click.echo("no turns")
    for n in nodes:
        lead = f"{n.depth:3d}  " if depth else ""
        click.echo(f"{lead}{n.id}  {n.created}  thread={n.thread}  {n.path}")


@turn_group.command("ancestors")
@click.argument("turn_id")
@click.option("--depth", type=_DEPTH, default=10, show_default=True, help="How many parent steps.")
@click.option("--limit", type=_LIMIT, default=1000, show_default=True, help="At most N turns.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def ancestors_cmd(
    ctx: click.Context, turn_id: str, depth: int, limit: int, as_json: bool, root: str | None
) -> None:
    """The turns TURN_ID descends from, nearest first (depth = parent steps).

    Example: memdir turn ancestors 01jf3k... --depth 50 --json
    """
    with memory(ctx, root) as mem:
        nodes = mem.ancestors(turn_id, depth=depth, limit=limit)
    _print_nodes(nodes, as_json)


@turn_group.command("descendants")
@click.argument("turn_id")
@click.option("--depth", type=_DEPTH, default=10, show_default=True, help="How many child steps.")
@click.option("--limit", type=_LIMIT, default=1000, show_default=True, help="At most N turns.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def descendants_cmd(
    ctx: click.Context, turn_id: str, depth: int, limit: int, as_json: bool, root: str | None
) -> None:
    """The turns that name TURN_ID as a parent, directly or not, nearest first.

    Example: memdir turn descendants 01jf3k...
    """
    with memory(ctx, root) as mem:
        nodes = mem.descendants(turn_id, depth=depth, limit=limit)
    _print_nodes(nodes, as_json)


@turn_group.command("thread")
@click.argument("thread")
@click.option("--last", type=_LAST, default=20, show_default=True, help="How many turns.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@root_flag
@click.pass_context
def thread_cmd(ctx: click.Context, thread: str, last: int, as_json: bool, root: str | None) -> None:
    """The latest turns of THREAD, newest first.

    Example: memdir turn thread support-1 --last 5
    """
    with memory(ctx, root) as mem:
        nodes = mem.thread(thread, last=last)
    _print_nodes(nodes, as_json, depth=False)


@click.command("context")
@click.option("--thread", required=True, help="The thread the turn belongs to.")
@click.option("--user", default="", help="The user of the turn.")
@click.option(
    "--keywords", "--keyword", "keywords", multiple=True, help="Keywords (repeatable or a,b)."
)
@click.option(
    "--budget", type=int, default=None, help="Token budget (default turns.context_budget)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the pack as JSON (items, reasons).")
@root_flag
@click.pass_context
def context_cmd(
    ctx: click.Context,
    thread: str,
    user: str,
    keywords: tuple[str, ...],
    budget: int | None,
    as_json: bool,
    root: str | None,
) -> None:
    """Mode one: print the context pack for the start of a turn, within a token budget.

    The pack holds SNAPSHOT.md, the routers, the latest turns of the thread,
    recent turns of the user elsewhere, turns matching the keywords and recent
    DAG ancestors; every item says why it is there.

    Example: memdir context --thread support-1 --user ana --keywords deploy --budget 1500
    """
    with memory(ctx, root) as mem:
        pack = mem.context(thread=thread, user=user, keywords=_split(keywords), budget=budget)
    if as_json:
        echo_json(pack.to_dict())
        return
    sys.stdout.write(pack.text)
    if pack.omitted:
        click.echo(
            f"note: {len(pack.omitted)} item(s) did not fit the budget of {pack.budget} tokens "
            "(--json lists them)",
            err=True,
        )
    for item in pack.skipped:
        click.echo(
            f"note: a turn record could not be read: {item['path']}: {item['error']}", err=True
        )
