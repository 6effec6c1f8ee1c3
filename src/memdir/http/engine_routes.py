"""Routes for the knowledge engine: ingest, consolidate (plan, apply), query, refine,
evaluate, reflect, episodes. They see the whole store, so a prefix-confined token may
only ingest (into ``inbox/``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import Field

from .auth import (
    ActorHeader,
    Mem,
    ProvenanceHeader,
    Reader,
    Writer,
    check_actor,
    check_provenance,
)
from .strict import StrictBody, strict_request

router = APIRouter(tags=["engine"], dependencies=[Depends(strict_request)])


class Source(StrictBody):
    name: str = Field(description="The source's name (a file name or a URL).", min_length=1)
    content: str = Field(description="The raw text (UTF-8).")


class IngestBody(StrictBody):
    sources: list[Source] = Field(min_length=1, max_length=1000)


class ConsolidateBody(StrictBody):
    apply: dict[str, Any] | None = Field(
        default=None,
        description='What the plan\'s contract.return asks for: {"articles": [{"source", '
        '"bundle", "topic", "article"}], "quarantine": [{"source", "reason"}]}: an article per '
        "source filed, or the reason a source belongs to no bundle. Omit it to let memdir "
        "write the articles.",
    )
    limit: int | None = Field(default=None, ge=1, le=100_000)
    turns: bool | None = Field(
        default=None,
        description="Also fold unmerged turns into thread pages (default: the store's setting).",
    )


class ReleaseBody(StrictBody):
    path: str = Field(max_length=4000, description="The quarantined source (quarantine/...).")
    bundle: str = Field(max_length=200, description="The bundle it belongs to.")
    topic: str | None = Field(default=None, max_length=200)


class RefineBody(StrictBody):
    label: str | None = Field(default=None, max_length=200)


class EpisodeBody(StrictBody):
    kind: str = Field(description="life or signal.")
    situation: str
    actions: list[str] = Field(default_factory=list)
    outcome: str = "success"
    insights: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    intent: str = ""
    slug: str | None = None


@router.post("/v1/ingest", status_code=201)
def ingest(
    body: IngestBody,
    mem: Mem,
    principal: Writer,
    x_actor: ActorHeader = None,
    x_provenance: ProvenanceHeader = None,
) -> list[dict[str, Any]]:
    """Place raw sources in ``inbox/`` as episodic ingest documents (to consolidate later)."""
    actor = check_actor(x_actor, principal)
    prov = check_provenance(x_provenance)
    principal.check_path("inbox/")
    items = [(s.name, s.content) for s in body.sources]
    return mem.ingest(items, actor=actor, provenance=prov)


@router.get("/v1/quarantine")
def quarantine_list(mem: Mem, principal: Reader) -> Any:
    """The sources consolidate could not file, oldest first, with reasons and scores."""
    principal.require_unconfined("the quarantine list")
    return mem.quarantine_list()


@router.post("/v1/quarantine/release")
def quarantine_release(
    body: ReleaseBody, mem: Mem, principal: Writer, x_actor: ActorHeader = None
) -> Any:
    """Move a quarantined source back to inbox/ naming its bundle (filed at the next
    consolidate)."""
    principal.require_unconfined("quarantine release")
    actor = check_actor(x_actor, principal)
    return mem.quarantine_release(body.path, bundle=body.bundle, topic=body.topic, actor=actor)


@router.post("/v1/consolidate/plan")
def consolidate_plan(mem: Mem, principal: Reader) -> Any:
    """The work packet: unmerged sources, their bundles, and the article contract to fill."""
    principal.require_unconfined("consolidate")
    return mem.consolidate(plan=True)


@router.post("/v1/consolidate")
def consolidate(
    mem: Mem, principal: Writer, body: ConsolidateBody | None = None, x_actor: ActorHeader = None
) -> Any:
    """Fold unmerged sources into cited articles (or apply a completed work packet)."""
    principal.require_unconfined("consolidate")
    actor = check_actor(x_actor, principal)
    req = body or ConsolidateBody()
    return mem.consolidate(apply=req.apply, limit=req.limit, actor=actor, turns=req.turns)


@router.get("/v1/query")
def query(
    mem: Mem,
    principal: Reader,
    q: Annotated[str, Query(description="A question in plain words.")],
) -> Any:
    """Tiered recall: snapshot, then the index walk, then search; says when nothing is found."""
    principal.require_unconfined("query")
    return mem.query(q)


@router.post("/v1/refine")
def refine(mem: Mem, principal: Writer, body: RefineBody | None = None) -> Any:
    """The drift audit against the harness, labelled against the previous run."""
    principal.require_unconfined("refine")
    return mem.refine(label=body.label if body else None)


@router.post("/v1/evaluate")
def evaluate(mem: Mem, principal: Writer) -> Any:
    """Run evals/questions.yaml: recall@k, MRR, files read; compared with the last run."""
    principal.require_unconfined("evaluate")
    return mem.evaluate()


@router.post("/v1/reflect")
def reflect(mem: Mem, principal: Writer) -> Any:
    """Merge recurring insights into LESSONS.md, distil, regenerate SNAPSHOT.md."""
    principal.require_unconfined("reflect")
    return mem.reflect()


@router.post("/v1/episodes", status_code=201)
def episode_add(body: EpisodeBody, mem: Mem, principal: Writer) -> Any:
    """Record a life or signal experience episode."""
    principal.check_path(f"episodes/{body.kind}/")
    return mem.episode_add(
        kind=body.kind,
        situation=body.situation,
        actions=body.actions,
        outcome=body.outcome,
        insights=body.insights,
        tags=body.tags,
        intent=body.intent,
        slug=body.slug,
    )
