"""Routes for turn memory: record, show, work log, ancestors, descendants, thread, context."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import JSONResponse
from pydantic import Field

from ..access import authorize_parents
from ..doc.ids import new_id
from ..doc.turnrecord import is_turn_id, turn_path
from .auth import ActorHeader, Mem, ProvenanceHeader, Reader, Writer, check_actor, check_provenance
from .strict import StrictBody, strict_request

router = APIRouter(tags=["turns"], dependencies=[Depends(strict_request)])


class TurnBody(StrictBody):
    thread: str = Field(description="The conversation or task thread id.")
    input: str = Field(default="", description="What the agent was asked.")
    output: str = Field(default="", description="What the agent answered.")
    worklog: list[dict[str, Any]] | None = Field(
        default=None, description="The raw tool-call loop, one JSON object per step."
    )
    user: str = ""
    channel: str = ""
    parents: list[str] = Field(
        default_factory=list,
        description="What this turn used: ids of turns and paths of documents of the store.",
    )
    keywords: list[str] = Field(default_factory=list)


class ContextBody(StrictBody):
    thread: str
    user: str = ""
    keywords: list[str] = Field(default_factory=list)
    budget: int | None = Field(default=None, ge=1, le=1_000_000)


def _turn_path(turn_id: str) -> str | None:
    return turn_path(turn_id) if is_turn_id(turn_id) else None


@router.post("/v1/turns", status_code=201)
def record_turn(
    body: TurnBody,
    mem: Mem,
    principal: Writer,
    x_actor: ActorHeader = None,
    x_provenance: ProvenanceHeader = None,
) -> Any:
    """Store a turn record (input, work log, output, parents, thread, user, keywords)."""
    actor = check_actor(x_actor, principal)
    prov = check_provenance(x_provenance)
    ident = new_id()
    principal.check_path(turn_path(ident))
    authorize_parents(principal, mem.store, body.parents)
    record = mem.record_turn(
        thread=body.thread,
        input=body.input,
        output=body.output,
        worklog=body.worklog,
        user=body.user,
        channel=body.channel,
        parents=body.parents,
        keywords=body.keywords,
        provenance=prov,
        actor=actor,
        id=ident,
    )
    return record.to_dict()


@router.get("/v1/turns/{turn_id}")
def turn_show(turn_id: str, mem: Mem, principal: Reader) -> Any:
    """A turn record: frontmatter fields and the Input, Compact and Output sections."""
    path = _turn_path(turn_id)
    if path is not None:
        principal.check_path(path)
    return mem.turn_show(turn_id).to_dict()


@router.get("/v1/turns/{turn_id}/worklog")
def turn_worklog(turn_id: str, mem: Mem, principal: Reader) -> Response:
    """The raw work log of a turn as recorded (JSON lines; empty when it had none)."""
    path = _turn_path(turn_id)
    if path is not None:
        principal.check_path(path)
    return Response(mem.turn_worklog(turn_id), media_type="application/x-ndjson")


def _nodes(principal: Any, nodes: list[Any]) -> list[dict[str, Any]]:
    return [n.to_dict() for n in nodes if principal.covers(n.path)]


@router.get("/v1/turns/{turn_id}/ancestors")
def ancestors(
    turn_id: str,
    mem: Mem,
    principal: Reader,
    depth: Annotated[int, Query(ge=1, le=1000)] = 10,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> list[dict[str, Any]]:
    """Walk the DAG up: the turns this one descends from, nearest first."""
    path = _turn_path(turn_id)
    if path is not None:
        principal.check_path(path)
    return _nodes(principal, mem.ancestors(turn_id, depth=depth, limit=limit))


@router.get("/v1/turns/{turn_id}/descendants")
def descendants(
    turn_id: str,
    mem: Mem,
    principal: Reader,
    depth: Annotated[int, Query(ge=1, le=1000)] = 10,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
) -> list[dict[str, Any]]:
    """Walk the DAG down: the turns that name this one as a parent, nearest first."""
    path = _turn_path(turn_id)
    if path is not None:
        principal.check_path(path)
    return _nodes(principal, mem.descendants(turn_id, depth=depth, limit=limit))


@router.get("/v1/threads/{thread}")
def thread(
    thread: str,
    mem: Mem,
    principal: Reader,
    last: Annotated[int, Query(ge=1, le=10_000)] = 20,
) -> list[dict[str, Any]]:
    """The latest turns of a thread, newest first."""
    return _nodes(principal, mem.thread(thread, last=last))


@router.post("/v1/context")
def context(body: ContextBody, mem: Mem, principal: Reader) -> JSONResponse:
    """Mode one: the cheap context pack for the start of a turn, each item with its reason."""
    principal.require_unconfined("the context pack")
    pack = mem.context(body.thread, user=body.user, keywords=body.keywords, budget=body.budget)
    return JSONResponse(pack.to_dict())
