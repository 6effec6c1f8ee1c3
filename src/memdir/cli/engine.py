"""Engine commands: bundle, ingest, consolidate, query, refine, evaluate, reflect, episode,
harness."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .common import echo_json, memory, read_input, root_flag

as_json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group("bundle")
def bundle_group() -> None:
    """Bundles: OKF folders under wiki/, each with a scope in PROGRAM.md.

    Example: memdir bundle add ops --scope "deploys, rollbacks, incidents"
    """


@bundle_group.command("add")
@click.argument("name")
@click.option("--scope", required=True, help="The subjects routed to this bundle.")
@root_flag
@click.pass_context
def bundle_add_cmd(ctx: click.Context, name: str, scope: str, root: str | None) -> None:
    """Add a bundle (or change its scope).

    Example: memdir bundle add cooking --scope "recipes, baking bread, fermentation"
    """
    with memory(ctx, root) as mem:
        echo_json(mem.bundle_add(name, scope))


@bundle_group.command("list")
@root_flag
@click.pass_context
def bundle_list_cmd(ctx: click.Context, root: str | None) -> None:
    """List bundles with their scope and article count.

    A folder under wiki/ whose bundle is not in PROGRAM.md (removed with `memdir
    bundle remove`, its articles kept) is listed as "not in PROGRAM.md".

    Example: memdir bundle list
    """
    with memory(ctx, root) as mem:
        for b in mem.bundle_list():
            scope = b["scope"] if b["in_program"] else "(not in PROGRAM.md)"
            click.echo(f"{b['bundle']}\t{b['articles']} articles\t{scope}")


@bundle_group.command("remove")
@click.argument("name")
@root_flag
@click.pass_context
def bundle_remove_cmd(ctx: click.Context, name: str, root: str | None) -> None:
    """Remove a bundle from PROGRAM.md; its articles stay on disk.

    Example: memdir bundle remove cooking
    """
    with memory(ctx, root) as mem:
        echo_json(mem.bundle_remove(name))


def _bundle_commands() -> None:
    from .bundle import audit_cmd, publish_cmd

    bundle_group.add_command(publish_cmd)
    bundle_group.add_command(audit_cmd)


_bundle_commands()


@click.command("ingest")
@click.argument("files", nargs=-1, required=True)
@click.option("--provenance", help="type:id recorded in derived-from.")
@click.option("--actor", help="Who ingests (default anonymous).")
@root_flag
@click.pass_context
def ingest_cmd(
    ctx: click.Context,
    files: tuple[str, ...],
    provenance: str | None,
    actor: str | None,
    root: str | None,
) -> None:
    """Place raw sources in inbox/ (FILE... or - for stdin).

    Example: memdir ingest notes/*.md --provenance run:42
    """
    with memory(ctx, root) as mem:
        items: list[tuple[str, bytes]] = []
        for name in files:
            if name == "-":
                items.append(("-", read_input(mem, None)))
            else:
                items.append((Path(name).name, read_input(mem, name)))
        for row in mem.ingest(items, actor=actor, provenance=provenance):
            click.echo(f"{row['path']}\t{row['episode_id']}")


@click.command("consolidate")
@click.option("--plan", is_flag=True, help="Print the JSON work packet instead of writing.")
@click.option(
    "--apply", "apply_file", type=click.Path(dir_okay=False), help="File returned articles."
)
@click.option("--limit", type=click.IntRange(min=1), help="Consolidate at most N sources.")
@click.option(
    "--turns/--no-turns",
    default=None,
    help="Also fold unmerged turn records into thread pages (default: engine.consolidate_turns).",
)
@as_json_flag
@root_flag
@click.pass_context
def consolidate_cmd(
    ctx: click.Context,
    plan: bool,
    apply_file: str | None,
    limit: int | None,
    turns: bool | None,
    as_json: bool,
    root: str | None,
) -> None:
    """Turn inbox sources into cited articles; quarantine misfits; refine, reflect, commit.

    With --turns, every turn record no page has merged yet is folded into its thread's page
    (threads/<thread>.md, citing each turn), so coverage of turns reaches 100%.

    Example: memdir consolidate --plan > packet.json; memdir consolidate --apply articles.json
    """
    with memory(ctx, root) as mem:
        result: dict[str, Any] = mem.consolidate(
            plan=plan, apply=apply_file, limit=limit, turns=turns
        )
    if plan or as_json:
        # The JSON on stdout is usually redirected to a file: say on stderr which sources
        # stay in inbox/ and why, so they are not missed.
        for reason in result["skipped"]:
            click.echo(f"skipped {reason}", err=True)
        echo_json(result)
        return
    router = result.get("router") or {}
    if router.get("method") == "lexical" and router.get("note"):
        click.echo(f"routing by words only: {router['note']}")
    for path in result["articles"]:
        click.echo(f"filed {path}")
    for q in result["quarantined"]:
        click.echo(f"quarantined {q['source']}: {q['reason']}")
    for reason in result["skipped"]:
        click.echo(f"skipped {reason}")
    for note in result["notes"]:
        click.echo(f"note: {note}")
    for page in result["turns"]["pages"]:
        click.echo(f"folded turns into {page}")
    for skipped in result["turns"]["skipped"]:
        click.echo(f"skipped turn {skipped['path']}: {skipped['reason']}")
    click.echo(result["commit"])


@click.command("query")
@click.argument("question")
@as_json_flag
@root_flag
@click.pass_context
def query_cmd(ctx: click.Context, question: str, as_json: bool, root: str | None) -> None:
    """Tiered recall: snapshot, index walk, then search. Pointers with citations.

    Example: memdir query "how often do I feed the starter?"
    """
    with memory(ctx, root) as mem:
        result = mem.query(question)
    if as_json:
        echo_json(result)
        return
    if not result["found"]:
        click.echo(result["message"])
        for a in result.get("nearest", []):
            click.echo(f"  nearest, not an answer: {a['path']} - {a['title']}")
    for line in result["snapshot"]:
        click.echo(f"[tier 0] {line}")
    for a in result["answers"]:
        click.echo(f"[tier {a['tier']}] {a['path']} - {a['title']}")
        for p in a["passages"]:
            cited = f"  ({', '.join(p['citations'])})" if p["citations"] else ""
            click.echo(f"    {p['text']}{cited}")
    read = result["read"]
    click.echo(
        f"read {len(read['indexes'])} index(es), {len(read['bodies'])} body(ies), "
        f"{result['tokens_read']} tokens"
    )


@click.command("refine")
@click.option("--label", help="A name for this run in runs.tsv.")
@click.option("--fail-on-regress", is_flag=True, help="Exit 1 when drift went up.")
@as_json_flag
@root_flag
@click.pass_context
def refine_cmd(
    ctx: click.Context, label: str | None, fail_on_regress: bool, as_json: bool, root: str | None
) -> None:
    """Audit drift (each defect with its files) and OKF conformance; advance/hold/regress.

    Example: memdir refine --fail-on-regress
    """
    with memory(ctx, root) as mem:
        result = mem.refine(label=label)
    if as_json:
        echo_json(result)
    else:
        click.echo(
            f"run=refine {result['label']} drift={result['drift']} delta={result['delta']:+d}"
        )
        for name, comp in result["components"].items():
            click.echo(f"  {name}: {comp['count']}")
            for item in comp["items"]:
                click.echo(f"    - {item}")
        for bundle, verdict in result["okf"].items():
            click.echo(
                f"  okf {bundle}: {verdict if isinstance(verdict, str) else '; '.join(verdict)}"
            )
        for item in result["oversized_topics"]:
            click.echo(f"  oversized topic: {item}")
        if result["stale_index"]:
            click.echo("  search index is stale: run memdir reindex")
        for path in result.get("sync_conflicts", []):
            click.echo(f"  changed on two machines: {path} (memdir sync conflicts)")
    if fail_on_regress and result["label"] == "regress":
        ctx.exit(1)


@click.command("evaluate")
@as_json_flag
@root_flag
@click.pass_context
def evaluate_cmd(ctx: click.Context, as_json: bool, root: str | None) -> None:
    """Run evals/questions.yaml through query: hit@k, MRR, recall per tier, reads.

    Example: memdir evaluate --json
    """
    with memory(ctx, root) as mem:
        result = mem.evaluate()
    for path in result["missing_expected"]:
        click.echo(f"warning: expected path not found: {path}", err=True)
    if as_json:
        echo_json(result)
        return
    click.echo(
        f"run=evaluate {result['label']} questions={result['questions']} "
        f"hit@1={result['hit@1']} hit@3={result['hit@3']} mrr={result['mrr']} "
        f"bodies/q={result['bodies_read_avg']} tokens/q={result['tokens_read_avg']}"
    )


@click.command("reflect")
@as_json_flag
@root_flag
@click.pass_context
def reflect_cmd(ctx: click.Context, as_json: bool, root: str | None) -> None:
    """Merge insights into LESSONS.md, distil old episodes, regenerate SNAPSHOT.md.

    Example: memdir reflect
    """
    with memory(ctx, root) as mem:
        result = mem.reflect()
    if as_json:
        echo_json(result)
    else:
        click.echo(
            f"{result['episodes']} episodes, {result['lessons']} lessons, "
            f"{len(result['distilled'])} distilled, snapshot {result['snapshot_tokens']}/"
            f"{result['snapshot_cap']} tokens"
        )


@click.group("episode")
def episode_group() -> None:
    """Experience episodes (life and signal; operational ones come from every verb).

    Example: memdir episode add --kind signal --situation "Asked for metric" --insight "Use grams."
    """


@episode_group.command("add")
@click.option(
    "--kind",
    type=click.Choice(["life", "signal"]),
    required=True,
    help="life (id life-DATE) or signal (id signal-SLUG of the situation).",
)
@click.option("--situation", required=True, help="What the episode was about (one line).")
@click.option("--action", "actions", multiple=True, help="What was done (repeatable).")
@click.option(
    "--outcome",
    type=click.Choice(["success", "partial", "failure"]),
    default="success",
    show_default=True,
    help="How it went.",
)
@click.option("--insight", "insights", multiple=True, help="Repeatable; becomes a lesson.")
@click.option("--tag", "tags", multiple=True, help="Repeatable; 'decision' marks an open decision.")
@root_flag
@click.pass_context
def episode_add_cmd(
    ctx: click.Context,
    kind: str,
    situation: str,
    actions: tuple[str, ...],
    outcome: str,
    insights: tuple[str, ...],
    tags: tuple[str, ...],
    root: str | None,
) -> None:
    """Record a life or signal episode.

    Example: memdir episode add --kind signal --situation "Metric please" --insight "Use grams."
    """
    with memory(ctx, root) as mem:
        echo_json(
            mem.episode_add(
                kind=kind,
                situation=situation,
                actions=actions,
                outcome=outcome,
                insights=insights,
                tags=tags,
            )
        )


@click.group("harness")
def harness_group() -> None:
    """The frozen HARNESS.md and its pinned hash.

    Example: memdir harness accept
    """


@harness_group.command("accept")
@root_flag
@click.pass_context
def harness_accept_cmd(ctx: click.Context, root: str | None) -> None:
    """Pin the current HARNESS.md (after a deliberate change); logged as its own run.

    Example: memdir harness accept
    """
    with memory(ctx, root) as mem:
        click.echo(json.dumps(mem.harness_accept(), indent=2))


@click.group("quarantine")
def quarantine_group() -> None:
    """The sources consolidate could not file, and releasing one into a bundle.

    Example: memdir quarantine release quarantine/x-notes.md --bundle kitchen
    """


@quarantine_group.command("list")
@as_json_flag
@root_flag
@click.pass_context
def quarantine_list_cmd(ctx: click.Context, as_json: bool, root: str | None) -> None:
    """List quarantined sources, oldest first, with the reason and the routing scores.

    Example: memdir quarantine list --json
    """
    with memory(ctx, root) as mem:
        found = mem.quarantine_list()
    if as_json:
        echo_json(found)
        return
    if not found:
        click.echo("quarantine/ is empty")
    for entry in found:
        scores = ", ".join(f"{b} {s:.2f}" for b, s in sorted(entry["scores"].items()))
        by = f" (by {entry['quarantined_by']})" if entry.get("quarantined_by") else ""
        line = f"{entry['path']}: {entry['reason']}{by}"
        click.echo(line + (f" [{scores}]" if scores else ""))


@quarantine_group.command("release")
@click.argument("path")
@click.option("--bundle", required=True, help="The bundle the source belongs to.")
@click.option("--topic", help="The topic inside the bundle (default: picked as usual).")
@click.option("--actor", help="Who releases it (the commit's author).")
@as_json_flag
@root_flag
@click.pass_context
def quarantine_release_cmd(
    ctx: click.Context,
    path: str,
    bundle: str,
    topic: str | None,
    actor: str | None,
    as_json: bool,
    root: str | None,
) -> None:
    """Move a quarantined source back to inbox/, naming its bundle; the next consolidate
    files it there.

    Example: memdir quarantine release quarantine/x-notes.md --bundle kitchen --topic bread
    """
    with memory(ctx, root) as mem:
        done = mem.quarantine_release(path, bundle=bundle, topic=topic, actor=actor)
    if as_json:
        echo_json(done)
        return
    click.echo(f"released {done['from']} to {done['path']} (bundle {done['bundle']})")
