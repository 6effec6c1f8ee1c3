"""The knowledge engine's MCP tools: ingest, consolidate, query, refine, evaluate, reflect and
episodes (registered by :func:`memdir.mcp.tools.register`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from ..access import Principal
from ..errors import InvalidInput
from .tooling import Actor, Provenance, Tooling


def register(tool: Callable[..., Callable[[Callable[..., Any]], Any]], t: Tooling) -> None:
    """Add the engine's tools through ``tool`` (the tool decorator of the server)."""
    mem = t.memory

    # -- the knowledge engine ------------------------------------------------------------

    @tool(
        "Put raw sources (notes, transcripts, documents) into the inbox as episodes, to be "
        "consolidated into the wiki later. Give each a name and its text.",
        writes=True,
    )
    def ingest(
        sources: Annotated[
            list[dict[str, str]],
            Field(description="A list of {name, content} objects.", min_length=1),
        ],
        ctx: Context,
        provenance: Provenance = None,
        actor: Actor = None,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.check_path("inbox/")
            items = []
            for n, item in enumerate(sources, start=1):
                name, content = item.get("name"), item.get("content")
                if not isinstance(name, str) or not isinstance(content, str):
                    raise InvalidInput(f"source {n} needs a name and a content (both text)")
                items.append((name, content))
            who = t.author(p, actor)
            return mem.ingest(items, actor=who, provenance=provenance)

        return t.run(ctx, "write", "ingest", body)

    @tool(
        "Step 1 of consolidating with you as the writer: returns the work packet (the "
        "unmerged inbox sources, the bundle each belongs to, the article contract). Write the "
        "articles it asks for, then call consolidate_apply with the completed packet."
    )
    def consolidate_plan(ctx: Context) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.require_unconfined("consolidate")
            return mem.consolidate(plan=True)

        return t.run(ctx, "read", "consolidate_plan", body)

    @tool(
        "Step 2 of consolidating: file the completed work packet (articles with citations); "
        "memdir validates it, writes the articles, records merged-from and updates the "
        "routers. Without a packet, memdir consolidates the inbox with its own offline writer.",
        writes=True,
    )
    def consolidate_apply(
        ctx: Context,
        packet: Annotated[
            dict[str, Any] | None,
            Field(
                description='What the plan\'s contract.return asks for: {"articles": [{"source", '
                '"bundle", "topic", "article"}], "quarantine": [{"source", "reason"}]}: one '
                "article per source filed, or the reason a source belongs to no bundle (it is "
                "moved to quarantine/). Omit it to let memdir write the articles itself."
            ),
        ] = None,
        limit: Annotated[
            int | None,
            Field(description="Without a packet: at most this many sources.", ge=1, le=100_000),
        ] = None,
        turns: Annotated[
            bool | None,
            Field(
                description="Also fold every unmerged turn record into its thread's page "
                "(threads/<thread>.md). Default: the store's engine.consolidate_turns setting."
            ),
        ] = None,
        actor: Actor = None,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.require_unconfined("consolidate")
            who = t.author(p, actor)
            return mem.consolidate(apply=packet, limit=limit, actor=who, turns=turns)

        return t.run(ctx, "write", "consolidate_apply", body)

    @tool(
        "Ask the wiki a question: tiered recall (snapshot, then the index routers, then "
        "search) returning the articles that answer it with citations, or saying plainly that "
        "nothing was found. Prefer it to search for questions about durable knowledge."
    )
    def query(
        question: Annotated[str, Field(description="The question in plain words.")],
        ctx: Context,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.require_unconfined("query")
            return mem.query(question)

        return t.run(ctx, "read", "query", body)

    @tool(
        "Audit the wiki against the frozen harness: drift and its components, OKF "
        "conformance, and whether it regressed since the previous audit. Records the run.",
        writes=True,
    )
    def refine(
        ctx: Context,
        label: Annotated[str | None, Field(description="A name for this run.")] = None,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.require_unconfined("refine")
            return mem.refine(label=label)

        return t.run(ctx, "write", "refine", body)

    @tool(
        "Run the store's evaluation questions (evals/questions.yaml) through query: hit@k, "
        "MRR and files read, compared with the previous run. Records the run.",
        writes=True,
    )
    def evaluate(ctx: Context) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.require_unconfined("evaluate")
            return mem.evaluate()

        return t.run(ctx, "write", "evaluate", body)

    @tool(
        "Learn from experience: merge recurring insights of episodes into LESSONS.md, "
        "distil old episodes and regenerate SNAPSHOT.md (the snapshot `context` starts "
        "with). Run it at the end of a session or after consolidating.",
        writes=True,
    )
    def reflect(ctx: Context) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.require_unconfined("reflect")
            return mem.reflect()

        return t.run(ctx, "write", "reflect", body)

    @tool(
        "Record an experience episode for `reflect` to learn from: life (something that "
        "happened, with the actions taken, the outcome and its insights) or signal (a "
        "recurring cue worth noticing).",
        writes=True,
    )
    def episode_add(
        *,
        kind: Annotated[Literal["life", "signal"], Field(description="life or signal.")],
        situation: Annotated[str, Field(description="What the situation was.")],
        ctx: Context,
        actions: Annotated[
            list[str] | None, Field(description="What was done, one step each.")
        ] = None,
        outcome: Annotated[
            Literal["success", "partial", "failure"], Field(description="How it went.")
        ] = "success",
        insights: Annotated[
            list[str] | None, Field(description="What to remember next time.")
        ] = None,
        tags: Annotated[list[str] | None, Field(description="Tags for finding it.")] = None,
        intent: Annotated[str, Field(description="What you were trying to do.")] = "",
        slug: Annotated[
            str | None, Field(description="A short name for a signal episode's file.")
        ] = None,
    ) -> CallToolResult:
        def body(p: Principal) -> Any:
            p.check_path(f"episodes/{kind}/")
            return mem.episode_add(
                kind=kind,
                situation=situation,
                actions=actions or (),
                outcome=outcome,
                insights=insights or (),
                tags=tags or (),
                intent=intent,
                slug=slug,
            )

        return t.run(ctx, "write", "episode_add", body)

    _ = (ingest, consolidate_plan, consolidate_apply, query, refine, evaluate, reflect, episode_add)
