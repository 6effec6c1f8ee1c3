"""The web UI at ``/``: server-rendered pages over the same :class:`~memdir.service.Memory` as
the JSON API, in the same process (it never calls the API).

Pages check the caller's token as the API's routes do (scope, prefix); the server
middleware authenticates them from a bearer header or a sign-in session cookie
(:mod:`memdir.http.sessions`) and refuses state-changing requests from other origins.
"""

from __future__ import annotations

from .pages import routes, warm

__all__ = ["routes", "warm"]
