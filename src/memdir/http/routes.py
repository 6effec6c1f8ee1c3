"""Routes for the foundation verbs: files (read, write), ls, search, grep, memory report,
merge, forget, reindex, doctor, health."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from .. import __version__
from ..access import authorize_path
from ..errors import InvalidInput
from .auth import (
    ActorHeader,
    Admin,
    IfMatchHeader,
    Mem,
    ProvenanceHeader,
    Reader,
    Writer,
    check_actor,
    check_provenance,
)
from .serialize import jsonable
from .strict import QueryBool, StrictBody, strict_request

router = APIRouter(dependencies=[Depends(strict_request)])

_NON_NEGATIVE = re.compile(r"^[0-9]+$")


class WriteBody(StrictBody):
    content: str = Field(description="The whole markdown document (UTF-8).")
    message: str | None = Field(default=None, description="Git commit message.")


class WriteResponse(BaseModel):
    path: str
    hash: str
    etag: str
    size: int
    created: bool
    replaced: list[str] = Field(
        default_factory=list,
        description="derived-from / merged-from keys the content set, replacing the file's.",
    )


class MergeBody(StrictBody):
    page: str = Field(description="The page that consumed the episode (store-relative).")
    episode: str | None = Field(default=None, description="The episode id.")
    type: str = Field(default="episode", description="Episode type (episode, run, session ...).")
    path: str | None = Field(default=None, description="The episode's path (a path entry).")
    note: str | None = None


class ForgetBody(StrictBody):
    path: str
    reason: str | None = None
    # Strict: a destructive switch takes true or false, never "yes" or 1.
    purge: bool = Field(
        default=False, strict=True, description="Delete the file entirely (admin token)."
    )


class ReindexBody(StrictBody):
    full: bool = False


@router.get("/health", tags=["server"])
@router.get("/v1/health", tags=["server"])
def health() -> dict[str, Any]:
    """Liveness: answers without a token."""
    return {"status": "ok", "version": __version__}


@router.get("/v1/files/{path:path}", tags=["files"])
def read_file(
    path: str,
    mem: Mem,
    principal: Reader,
    response: Response,
    section: Annotated[
        str | None, Query(description="Only the section under this heading.")
    ] = None,
) -> dict[str, Any]:
    """Read a file (or one section of it). The ``ETag`` header feeds ``If-Match`` on write."""
    norm = authorize_path(principal, mem.store, path)
    result = mem.read(norm, section=section)
    response.headers["ETag"] = result.etag
    return result.to_dict()


@router.put(
    "/v1/files/{path:path}",
    tags=["files"],
    response_model=WriteResponse,
    responses={201: {"description": "Created"}, 412: {"description": "If-Match is stale"}},
)
def write_file(
    *,
    path: str,
    body: WriteBody,
    mem: Mem,
    principal: Writer,
    x_actor: ActorHeader = None,
    x_provenance: ProvenanceHeader = None,
    if_match: IfMatchHeader = None,
) -> JSONResponse:
    """Write a markdown document atomically; optimistic concurrency with ``If-Match``."""
    actor = check_actor(x_actor, principal)
    prov = check_provenance(x_provenance)
    norm = authorize_path(principal, mem.store, path)
    result = mem.write(
        norm, body.content, provenance=prov, actor=actor, message=body.message, if_match=if_match
    )
    data = {
        "path": result.path,
        "hash": result.hash,
        "etag": result.etag,
        "size": result.size,
        "created": result.created,
        "replaced": list(result.replaced),
    }
    status = 201 if result.created else 200
    return JSONResponse(data, status_code=status, headers={"ETag": result.etag})


@router.get("/v1/ls", tags=["read"])
def ls(
    mem: Mem,
    principal: Reader,
    prefix: Annotated[str | None, Query(description="Only paths under this prefix.")] = None,
    include_superseded: QueryBool = False,
) -> list[dict[str, Any]]:
    """Walk: the visible documents in walk order (path, title, type, memory_kind, size)."""
    return mem.ls(principal.confine(prefix), include_superseded=include_superseded)


@router.get("/v1/search", tags=["read"])
def search(
    *,
    mem: Mem,
    principal: Reader,
    q: Annotated[str, Query(description="Any text; quotes, colons and operators are plain text.")],
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    path_prefix: str | None = None,
    kind: Annotated[str | None, Query(description="memory_kind: episodic, semantic ...")] = None,
    type_: Annotated[str | None, Query(alias="type", description="Frontmatter type.")] = None,
    where: Annotated[list[str] | None, Query(description="key=value (repeatable).")] = None,
    include_superseded: QueryBool = False,
    mode: Annotated[str | None, Query(description="bm25, vector, hybrid or auto.")] = None,
    include_worklog: QueryBool = False,
) -> list[dict[str, Any]]:
    """Mode two: search; pointers (path, title, snippet, score, why), never bodies."""
    extra: dict[str, Any] = {"mode": mode} if mode else {}
    hits = mem.search(
        q,
        limit=limit,
        path_prefix=principal.confine(path_prefix),
        kind=kind,
        type=type_,
        where=where or [],
        include_superseded=include_superseded,
        include_worklog=include_worklog,
        **extra,
    )
    return [hit.to_dict() for hit in hits]


@router.get("/v1/grep", tags=["read"])
def grep(
    *,
    mem: Mem,
    principal: Reader,
    pattern: Annotated[str, Query(description="A Python regular expression.")],
    path_prefix: str | None = None,
    ignore_case: QueryBool = False,
    limit: Annotated[int, Query(ge=1, le=10000)] = 200,
    include_superseded: QueryBool = False,
) -> list[dict[str, Any]]:
    """Mode two: lines matching a regular expression, as path, line, text."""
    hits = mem.grep(
        pattern,
        path_prefix=principal.confine(path_prefix),
        ignore_case=ignore_case,
        limit=limit,
        include_superseded=include_superseded,
    )
    return [hit.to_dict() for hit in hits]


def _paging(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    if not _NON_NEGATIVE.match(value):
        raise InvalidInput(f"{name} must be a non-negative integer")
    return int(value)


@router.get("/v1/memory/report", tags=["memory"])
@router.get("/api/kiwi/memory/report", tags=["memory"])
def memory_report(
    *,
    mem: Mem,
    principal: Reader,
    episodes_prefix: Annotated[str | None, Query(description="Default from config.")] = None,
    limit: Annotated[str | None, Query(description="Page size of the two lists.")] = None,
    offset: Annotated[str | None, Query(description="Start of the page.")] = None,
) -> Response:
    """The KiwiFS-compatible coverage report; ``limit``/``offset`` page the two lists only."""
    from ..kiwi import gojson
    from ..kiwi import report as coverage

    principal.require_unconfined("the memory report")
    size = _paging(limit, "limit")
    start = _paging(offset, "offset") or 0
    report = mem.memory_report(episodes_prefix=episodes_prefix)
    data = coverage.report_to_json(report)
    end = None if size is None else start + size
    for key in ("episodic_files", "unmerged"):
        data[key] = (data.get(key) or [])[start:end]
    return Response(gojson.dumps_go(data), media_type="application/json")


@router.post("/v1/merge", tags=["memory"])
def merge(body: MergeBody, mem: Mem, principal: Writer, x_actor: ActorHeader = None) -> Any:
    """Record in a page's ``merged-from`` that it consumed an episode (idempotent)."""
    actor = check_actor(x_actor, principal)
    page = authorize_path(principal, mem.store, body.page)
    return mem.merge(
        page, episode=body.episode, type=body.type, path=body.path, note=body.note, actor=actor
    )


@router.post("/v1/forget", tags=["memory"])
def forget(body: ForgetBody, mem: Mem, principal: Writer, x_actor: ActorHeader = None) -> Any:
    """Supersede a document (kept, hidden from retrieval) or purge it (admin token)."""
    actor = check_actor(x_actor, principal)
    if body.purge:
        principal.require("admin", "purging a file")
    norm = authorize_path(principal, mem.store, body.path)
    return mem.forget(norm, reason=body.reason, purge=body.purge, actor=actor)


@router.post("/v1/reindex", tags=["admin"])
def reindex(mem: Mem, principal: Admin, body: ReindexBody | None = None) -> Any:
    """Bring the index in step with the files, or rebuild it (``full``)."""
    return jsonable(mem.reindex(full=bool(body and body.full)))


@router.get("/v1/doctor", tags=["admin"])
def doctor(mem: Mem, principal: Reader) -> Any:
    """Compare the index with the files (changes nothing)."""
    principal.require_unconfined("doctor")
    return mem.doctor().to_dict()
