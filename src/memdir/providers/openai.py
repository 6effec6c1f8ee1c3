"""The one client memdir's providers use for OpenAI-compatible model services.

Embeddings (``/embeddings``), chat completions (``/chat/completions``) and reranking
(``/rerank``) all go through :class:`OpenAIClient`, so every provider has the same
timeouts, the same bounded retry and the same error messages:

- a request waits ``timeout`` seconds for an answer and at most ``CONNECT_SECONDS`` for a
  connection (an unreachable host fails fast);
- a refused or dropped connection, ``429`` and ``500``/``502``/``503``/``504`` are tried
  again, ``RETRIES`` times at most, after ``BACKOFF_SECONDS`` doubled each time (or the
  server's ``Retry-After``, up to ``MAX_WAIT_SECONDS``). A timeout is not retried: the
  caller's timeout is the bound on how long it waits;
- the API key is the one given, else the value of the environment variable named by the
  provider's ``api_key_env`` setting, read at each request; it is sent as a Bearer token
  and blotted out of every message;
- every failure is one :class:`~memdir.errors.ProviderError` naming the provider, the URL
  (without credentials or query) and the HTTP status or transport error.

httpx (the ``llm`` extra) is imported when a client is made, so only a configured provider
needs it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .. import __version__
from ..errors import MissingExtra, ProviderError

LLM_EXTRA = "pip install 'memdir[llm]'"
#: Seconds to wait for a connection.
CONNECT_SECONDS = 5.0
#: How many times a failed request is sent again (so at most ``RETRIES + 1`` requests).
RETRIES = 2
#: Seconds before the first retry; each further retry waits twice as long.
BACKOFF_SECONDS = 0.1
#: The longest a ``Retry-After`` answer makes a retry wait.
MAX_WAIT_SECONDS = 5.0
#: Statuses that say "try again later".
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Characters of an error answer quoted in a message.
EXCERPT = 200
USER_AGENT = f"memdir/{__version__}"


def safe_url(url: str) -> str:
    """``url`` without user, password, query or fragment: what a message may show."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def clip(text: str) -> str:
    """``text`` on one line, cut at ``EXCERPT`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT else text[:EXCERPT] + "..."


class OpenAIClient:
    """Requests to one OpenAI-compatible service at ``base_url``.

    ``who`` names the provider in messages ("rerank provider 'http'"), ``section`` the
    settings section a missing key is configured in ("rerank").
    """

    def __init__(
        self,
        base_url: str,
        *,
        who: str,
        section: str,
        timeout: float,
        api_key_env: str = "",
        api_key: str | None = None,
        connect_timeout: float = CONNECT_SECONDS,
    ) -> None:
        try:
            import httpx
        except ImportError:
            raise MissingExtra(f"{who} needs httpx: {LLM_EXTRA}") from None
        self._httpx = httpx
        self.base_url = base_url.strip().rstrip("/")
        self.who = who
        self.section = section
        self.timeout = timeout
        self.connect_timeout = min(connect_timeout, timeout)
        self.api_key_env = api_key_env.strip()
        self._api_key = api_key
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=self.connect_timeout),
            headers={"User-Agent": USER_AGENT},
        )

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Free the connection pool."""
        self._client.close()

    # -- the key ------------------------------------------------------------------------

    def key(self) -> str:
        """The API key to send, or "" for none."""
        if self._api_key:
            return self._api_key
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""

    def hide(self, text: str) -> str:
        """``text`` with the API key blotted out (a server may echo it back)."""
        key = self.key()
        return text.replace(key, "***") if key else text

    def fail(self, message: str) -> ProviderError:
        """A :class:`ProviderError` for ``message``, without the key."""
        return ProviderError(self.hide(message))

    # -- requests -----------------------------------------------------------------------

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        """POST ``body`` as JSON to ``{base_url}/{path}``; the decoded JSON answer."""
        url = self.url(path)
        headers = {"Content-Type": "application/json"}
        key = self.key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        attempt = 0
        while True:
            wait = BACKOFF_SECONDS * 2**attempt
            try:
                resp = self._client.post(url, json=body, headers=headers)
            except self._httpx.TimeoutException as exc:
                raise self._timeout(url, exc) from None
            except self._httpx.TransportError as exc:
                # A refused, reset or dropped connection may work a moment later; a URL
                # httpx cannot use (no scheme, say) never will.
                transient = (self._httpx.NetworkError, self._httpx.RemoteProtocolError)
                if isinstance(exc, transient) and attempt < RETRIES:
                    attempt += 1
                    time.sleep(wait)
                    continue
                raise self.fail(
                    f"{self.who}: {safe_url(url)} cannot be reached: {type(exc).__name__}: {exc}"
                ) from None
            except self._httpx.HTTPError as exc:  # an invalid URL, say
                raise self.fail(
                    f"{self.who}: {safe_url(url)}: {type(exc).__name__}: {exc}"
                ) from None
            if resp.status_code in RETRY_STATUSES and attempt < RETRIES:
                attempt += 1
                time.sleep(_retry_after(resp.headers.get("Retry-After"), wait))
                continue
            return self._decode(url, resp, sent_key=bool(key))

    def _timeout(self, url: str, exc: Exception) -> ProviderError:
        if isinstance(exc, self._httpx.ConnectTimeout):
            return self.fail(
                f"{self.who}: {safe_url(url)} cannot be reached: "
                f"no connection within {self.connect_timeout:g} s"
            )
        return self.fail(
            f"{self.who}: {safe_url(url)} timed out: no answer within {self.timeout:g} s"
        )

    def _decode(self, url: str, resp: Any, *, sent_key: bool) -> Any:
        if resp.status_code >= 400:
            excerpt = clip(resp.text) or "(empty body)"
            hint = ""
            if resp.status_code in (401, 403) and not sent_key:
                hint = (
                    f" (no API key was sent: ${self.api_key_env} is not set)"
                    if self.api_key_env
                    else " (no API key was sent: name its variable in "
                    f"[{self.section}] api_key_env)"
                )
            raise self.fail(
                f"{self.who}: POST {safe_url(url)} answered HTTP {resp.status_code}: "
                f"{excerpt}{hint}"
            )
        try:
            return resp.json()
        except ValueError:
            excerpt = clip(resp.text) or "(empty body)"
            raise self.fail(
                f"{self.who}: {safe_url(url)} answered with something not JSON: {excerpt}"
            ) from None

    # -- the three endpoints ------------------------------------------------------------

    def embeddings(self, model: str, inputs: Sequence[str]) -> Any:
        """The answer to ``POST /embeddings`` (its ``data`` rows are the caller's to check)."""
        return self.post("embeddings", {"model": model, "input": list(inputs)})

    def chat(self, model: str, messages: Sequence[Mapping[str, str]]) -> str:
        """The text of the first choice of ``POST /chat/completions`` (temperature 0)."""
        body = {"model": model, "messages": list(messages), "temperature": 0}
        answer = self.post("chat/completions", body)
        try:
            text = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise self.fail(
                f"{self.who}: {safe_url(self.url('chat/completions'))} answered without "
                f"choices[0].message.content: {clip(repr(answer))}"
            ) from None
        if not isinstance(text, str):
            raise self.fail(f"{self.who}: the answer's content is not text")
        return text

    def rerank(self, model: str, query: str, documents: Sequence[str]) -> Any:
        """The answer to ``POST /rerank`` for every document (``top_n`` is their count)."""
        body = {
            "model": model,
            "query": query,
            "documents": list(documents),
            "top_n": len(documents),
        }
        return self.post("rerank", body)


def _retry_after(header: str | None, default: float) -> float:
    """Seconds a ``Retry-After`` header asks for (in seconds only), capped; else ``default``."""
    try:
        asked = float(header) if header is not None else default
    except ValueError:
        return default
    if not math.isfinite(asked):
        return default
    return min(max(asked, 0.0), MAX_WAIT_SECONDS)


def chat_with(llm: Any, who: str, messages: Sequence[Mapping[str, str]]) -> str:
    """One chat completion from the ``[llm]`` settings' endpoint (its model, timeout and
    key): the model writer, the route judge and the compactor ask through this."""
    with OpenAIClient(
        llm.base_url,
        who=who,
        section="llm",
        timeout=llm.timeout_seconds,
        api_key_env=llm.api_key_env,
    ) as client:
        return client.chat(llm.model, messages)


def json_reply(who: str, content: str) -> dict[str, Any]:
    """The JSON object a model's answer holds (its first ``{`` to its last ``}``, so prose
    or a code fence around it is left out); a ProviderError naming ``who`` otherwise."""
    import json
    import re

    match = re.search(r"\{.*\}", content, re.S)
    try:
        data = json.loads(match.group(0) if match else content)
    except json.JSONDecodeError as exc:
        raise ProviderError(f"{who} replied with invalid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ProviderError(f"{who} reply is not a JSON object")
    return data
