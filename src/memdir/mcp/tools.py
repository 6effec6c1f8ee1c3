"""The MCP tools, one per verb. Descriptions teach an agent the two memory modes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..access import Principal, authorize_parents
from ..doc.ids import new_id
from ..doc.turnrecord import is_turn_id, turn_path
from . import engine_tools
from .tooling import (
    READ_ONLY,
    REMOVES,
    WRITES,
    Actor,
    F,
    Limit,
    Path,
    Prefix,
    Provenance,
    SearchMode,
    Superseded,
    Tooling,
)


def register(server: MCPServer, t: Tooling) -> None:
    """Add every tool to ``server``."""
    mem = t.memory

    def tool(
        description: str, *, writes: bool = False, annotations: ToolAnnotations | None = None
    ) -> Callable[[F], F]:
        return server.tool(
            description=description,
            annotations=annotations or (WRITES if writes else READ_ONLY),
            structured_output=False,
        )

    def covered(principal: Principal, nodes: list[Any]) -> list[dict[str, Any]]:
        return [n.to_dict() for n in nodes if principal.covers(n.path)]

    def check_turn(principal: Principal, turn_id: str) -> None:
        if is_turn_id(turn_id):
            principal.check_path(turn_path(turn_id))

    # -- mode one ------------------------------------------------------------------

    @tool(
        "MODE ONE - call once at the START of every turn. Returns the context pack: a small, "
        "fixed-budget text with the recent turns of this thread, this user's recent turns, "
        "turns matching the keywords, recent DAG ancestors and the store snapshot; each item "
        "says why it is there and gives its turn id (use those ids as `parents` when you "
        "record the turn). Cheap: its size does not grow with the store. For anything more "
        "precise use mode two (search, grep, read, walk, turn_ancestors) during the turn."
    )
    def context(
        thread: Annotated[str, Field(description="The conversation or task thread id.")],
        ctx: Context,
        user: Annotated[str, Field(description="The user id, if any.")] = "",
        keywords: Annotated[
            list[str] | None, Field(description="A few words about this turn's topic.")
        ] = None,
        budget: Annotated[
            int | None, Field(description="Token budget.", ge=1, le=1_000_000)
        ] = None,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.require_unconfined("the context pack")
            return mem.context(thread, user=user, keywords=keywords or (), budget=budget)

        return t.run(ctx, "read", "context", body)

    # -- mode two ------------------------------------------------------------------

    @tool(
        "MODE TWO - search memory during a turn when you need something specific. Ranked "
        "pointers (path, title, snippet, score, why), never whole bodies: `read` the paths you "
        "need. Any text is a valid query. Filter by path prefix (episodes/, wiki/), kind "
        "(episodic, semantic), frontmatter type or other frontmatter fields (where)."
    )
    def search(
        *,
        query: Annotated[str, Field(description="What you are looking for, in plain words.")],
        ctx: Context,
        limit: Limit = None,
        path_prefix: Prefix = None,
        kind: Annotated[str | None, Field(description="memory_kind: episodic or semantic.")] = None,
        type: Annotated[str | None, Field(description="Frontmatter type, e.g. turn.")] = None,
        where: Annotated[
            list[str] | None,
            Field(
                description="Frontmatter filters as key=value, e.g. status=stable; all must hold."
            ),
        ] = None,
        mode: Annotated[
            SearchMode | None,
            Field(description="auto (default: hybrid when vectors can be used, else bm25)."),
        ] = None,
        include_superseded: Superseded = False,
        include_worklog: Annotated[
            bool,
            Field(description="Also search turn work logs (raw tool calls), after documents."),
        ] = False,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            extra: dict[str, Any] = {"mode": mode} if mode else {}
            hits = mem.search(
                query,
                limit=limit,
                path_prefix=p.confine(path_prefix),
                kind=kind,
                type=type,
                where=where or [],
                include_superseded=include_superseded,
                include_worklog=include_worklog,
                **extra,
            )
            return [h.to_dict() for h in hits]

        return t.run(ctx, "read", "search", body)

    @tool(
        "MODE TWO - exact lines matching a regular expression (Python syntax), as path, line "
        "number and text, in walk order. Use it for names, ids, error strings; use `search` "
        "for topics."
    )
    def grep(
        pattern: Annotated[str, Field(description="A regular expression.")],
        ctx: Context,
        path_prefix: Prefix = None,
        ignore_case: Annotated[
            bool, Field(description="Match upper and lower case alike.")
        ] = False,
        limit: Annotated[
            int, Field(description="Stop after this many lines.", ge=1, le=10000)
        ] = 200,
        include_superseded: Superseded = False,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            hits = mem.grep(
                pattern,
                path_prefix=p.confine(path_prefix),
                ignore_case=ignore_case,
                limit=limit,
                include_superseded=include_superseded,
            )
            return [h.to_dict() for h in hits]

        return t.run(ctx, "read", "grep", body)

    @tool(
        "MODE TWO - read one file of the store, or only one section of it (by heading). "
        "Returns path, etag and content; pass the etag as if_match to `write` to update the "
        "file without overwriting someone else's change."
    )
    def read(
        path: Path,
        ctx: Context,
        section: Annotated[str | None, Field(description="A heading, e.g. Key takeaways.")] = None,
    ) -> CallToolResult:
        return t.run(ctx, "read", "read", lambda p: mem.read(t.path(p, path), section=section))

    @tool(
        "MODE TWO - walk the store: list the visible documents (path, title, type, kind) under "
        "a folder, in order. Start at index.md routers or a prefix such as wiki/ or episodes/."
    )
    def walk(
        ctx: Context, prefix: Prefix = None, include_superseded: Superseded = False
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            return mem.ls(p.confine(prefix), include_superseded=include_superseded)

        return t.run(ctx, "read", "walk", body)

    # -- turns ---------------------------------------------------------------------

    @tool(
        "Record this turn at its END: your input, output, the ids of the turns you actually "
        "used (parents, from the context pack or a search), keywords, and the raw work log "
        "(one object per tool call). memdir compacts the work log; the turn becomes context "
        "for later turns.",
        writes=True,
    )
    def turn_record(
        *,
        thread: Annotated[str, Field(description="The conversation or task thread id.")],
        ctx: Context,
        input: Annotated[
            str, Field(description="What you were asked (give input, output or both).")
        ] = "",
        output: Annotated[str, Field(description="What you answered.")] = "",
        parents: Annotated[
            list[str] | None,
            Field(
                description="What this turn used: ids of turns (from the context pack or "
                "turn tools) and paths of documents (from search or read)."
            ),
        ] = None,
        keywords: Annotated[
            list[str] | None,
            Field(description="A few words about the turn's topic, kept in the record."),
        ] = None,
        worklog: Annotated[
            list[dict[str, Any]] | None,
            Field(description="The tool-call loop: one object per step (tool, args, result)."),
        ] = None,
        user: Annotated[str, Field(description="The user id, if any.")] = "",
        channel: Annotated[str, Field(description="Channel (cli, slack, api ...).")] = "",
        provenance: Provenance = None,
        actor: Actor = None,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            ident = new_id()
            p.check_path(turn_path(ident))
            authorize_parents(p, mem.store, parents or ())
            return mem.record_turn(
                thread=thread,
                input=input,
                output=output,
                worklog=worklog,
                user=user,
                channel=channel,
                parents=parents or (),
                keywords=keywords or (),
                provenance=provenance,
                actor=t.author(p, actor),
                id=ident,
            )

        return t.run(ctx, "write", "turn_record", body)

    @tool("MODE TWO - show one turn record: input, compact summary, output, parents, keywords.")
    def turn_show(
        turn_id: Annotated[str, Field(description="The turn id.")], ctx: Context
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            check_turn(p, turn_id)
            return mem.turn_show(turn_id)

        return t.run(ctx, "read", "turn_show", body)

    @tool(
        "MODE TWO - walk the turn DAG upwards: the turns this turn was built on (its parents, "
        "their parents ...), nearest first, with their ids and paths."
    )
    def turn_ancestors(
        turn_id: Annotated[str, Field(description="The turn id.")],
        ctx: Context,
        depth: Annotated[int, Field(description="How many generations up.", ge=1, le=1000)] = 10,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            check_turn(p, turn_id)
            return covered(p, mem.ancestors(turn_id, depth=depth))

        return t.run(ctx, "read", "turn_ancestors", body)

    @tool(
        "MODE TWO - walk the turn DAG downwards: the turns that used this turn as a parent "
        "(and the turns that used those ...), nearest first, with their ids and paths."
    )
    def turn_descendants(
        turn_id: Annotated[str, Field(description="The turn id.")],
        ctx: Context,
        depth: Annotated[int, Field(description="How many generations down.", ge=1, le=1000)] = 10,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            check_turn(p, turn_id)
            return covered(p, mem.descendants(turn_id, depth=depth))

        return t.run(ctx, "read", "turn_descendants", body)

    # -- writing and the memory model ----------------------------------------------------

    @tool(
        "Write a markdown file atomically (create or replace). Give provenance as type:id so "
        "the file records where it came from (derived-from). Pass if_match (the etag from "
        "`read`) to refuse the write if the file changed since you read it. A replaced file "
        "keeps its derived-from and merged-from unless content sets them (the result's "
        "replaced lists those it set).",
        writes=True,
    )
    def write(
        *,
        path: Path,
        content: Annotated[str, Field(description="The whole markdown document.")],
        ctx: Context,
        provenance: Provenance = None,
        actor: Actor = None,
        if_match: Annotated[str | None, Field(description="The etag from read.")] = None,
        message: Annotated[str | None, Field(description="Git commit message.")] = None,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            r = mem.write(
                t.path(p, path),
                content,
                provenance=provenance,
                actor=t.author(p, actor),
                message=message,
                if_match=if_match,
            )
            return {
                "path": r.path,
                "hash": r.hash,
                "etag": r.etag,
                "size": r.size,
                "created": r.created,
                "replaced": list(r.replaced),
            }

        return t.run(ctx, "write", "write", body)

    @tool(
        "The KiwiFS memory coverage report: how many episodes exist, which ones no page's "
        "merged-from references yet (unmerged), coverage %, contradictions. Use it to decide "
        "what to consolidate."
    )
    def memory_report(
        ctx: Context,
        episodes_prefix: Annotated[
            str | None,
            Field(description="Where episodes live (default from the store's config: episodes/)."),
        ] = None,
        limit: Annotated[
            int | None,
            Field(ge=0, description="Page size of episodic_files and unmerged (default: all)."),
        ] = None,
        offset: Annotated[int, Field(ge=0, description="Start of the page.")] = 0,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            from ..kiwi import report as coverage

            p.require_unconfined("the memory report")
            data = coverage.report_to_json(mem.memory_report(episodes_prefix=episodes_prefix))
            end = None if limit is None else offset + limit
            for key in ("episodic_files", "unmerged"):
                data[key] = (data.get(key) or [])[offset:end]
            return data

        return t.run(ctx, "read", "memory_report", body)

    @tool(
        "Record that a page consumed an episode (adds it to the page's merged-from, "
        "idempotently), after you folded the episode into the page.",
        writes=True,
    )
    def merge(
        *,
        page: Path,
        ctx: Context,
        episode: Annotated[
            str | None, Field(description="The episode id (give episode, path or both).")
        ] = None,
        type: Annotated[
            str, Field(description="What the source is: episode, run, session, trace ...")
        ] = "episode",
        path: Annotated[
            str | None, Field(description="The episode's store-relative path (or give episode).")
        ] = None,
        note: Annotated[str | None, Field(description="A short note kept in the entry.")] = None,
        actor: Actor = None,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            return mem.merge(
                t.path(p, page),
                episode=episode,
                type=type,
                path=path,
                note=note,
                actor=t.author(p, actor),
            )

        return t.run(ctx, "write", "merge", body)

    @tool(
        "Forget a document that is wrong or out of date. By default it is superseded: kept "
        "in the store and in git history, hidden from search, grep, walk and context. "
        "purge deletes the file instead (needs an admin token).",
        annotations=REMOVES,
    )
    def forget(
        *,
        path: Path,
        ctx: Context,
        reason: Annotated[str | None, Field(description="Why it is forgotten.")] = None,
        purge: Annotated[
            bool,
            Field(description="Delete the file instead of superseding it (admin).", strict=True),
        ] = False,
        actor: Actor = None,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            if purge:
                p.require("admin", "purging a file")
            return mem.forget(
                t.path(p, path),
                reason=reason,
                purge=purge,
                actor=t.author(p, actor),
            )

        return t.run(ctx, "write", "forget", body)

    engine_tools.register(tool, t)

    # -- index maintenance ---------------------------------------------------------------

    @tool("Compare the index with the files (changes nothing): what is missing or stale.")
    def doctor(ctx: Context) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.require_unconfined("doctor")
            return mem.doctor()

        return t.run(ctx, "read", "doctor", body)

    @tool(
        "Bring the index in step with the files, or rebuild it from them (full). Rarely "
        "needed: edits are indexed as they happen. Needs an admin token over HTTP.",
        writes=True,
    )
    def reindex(
        ctx: Context,
        full: Annotated[bool, Field(description="Rebuild the index from scratch.")] = False,
    ) -> CallToolResult:
        return t.run(ctx, "admin", "reindex", lambda p: mem.reindex(full=full))

    _ = (context, search, grep, read, walk, turn_record, turn_show, turn_ancestors)
    _ = (turn_descendants, write, memory_report, merge, forget, doctor, reindex)
