"""The HTTP API: an ASGI app (FastAPI) over :class:`memdir.service.Memory`.

Needs the ``server`` extra. Build it with :func:`memdir.http.app.create_app`;
``memdir serve`` runs it with uvicorn.
"""
