"""The ``openai`` embedder: any server that speaks the OpenAI ``/embeddings`` API.

That covers a local llama.cpp or Ollama server as well as hosted services. It is
configured by ``[embeddings] base_url``, ``model``, ``api_key_env`` and
``batch_size``; texts are sent ``batch_size`` at a time as
``POST {base_url}/embeddings`` with ``{"model", "input"}`` and the rows of the
answer's ``data`` list are put back in order by their ``index``.

The vector dimension is not configured: one request for a one-word text, made
when the embedder is built (only when vectors are needed), finds it. The model id
is ``openai:<model>``, so a store's vectors are never mixed with another model's.
httpx (the ``llm`` extra) is imported only when this provider is used. The API key
is read from the environment for each request and never appears in an error.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..doc.chunking import word_spans
from ..errors import MissingExtra, ProviderError
from .embedder import Embedder, _need_numpy, normalise

if TYPE_CHECKING:
    from ..settings import EmbeddingsSettings
    from .embedder import Matrix

NAME = "openai"
LLM_EXTRA = "pip install 'memdir[llm]'"
#: Seconds to wait for an answer (a local server may load its model on the first request).
TIMEOUT_SECONDS = 60.0
#: Seconds to wait for a connection: an unreachable host fails fast, so ``auto`` search
#: falls back to keywords without a long stall.
CONNECT_SECONDS = 5.0
#: The word sent to find the model's dimension.
PROBE_TEXT = "memory"
#: Characters of an error answer quoted in a message.
EXCERPT = 200


class OpenAIEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible ``/embeddings`` endpoint."""

    #: Tokens one input may hold. The server's tokenizer is unknown here, so a conservative
    #: size; chunks are cut by the base class in words, well below it.
    window = 512

    def __init__(self, settings: EmbeddingsSettings) -> None:
        if not settings.base_url.strip() or not settings.model.strip():
            raise ProviderError(
                f"embeddings provider {NAME!r}: set [embeddings] base_url and model"
            )
        try:
            import httpx
        except ImportError:
            raise MissingExtra(
                f"the {NAME!r} embeddings provider needs httpx: {LLM_EXTRA}"
            ) from None
        self._np = _need_numpy()
        self._httpx = httpx
        self.model = settings.model.strip()
        self.url = settings.base_url.strip().rstrip("/") + "/embeddings"
        self.api_key_env = settings.api_key_env.strip()
        self.batch_size = max(1, settings.batch_size)
        self.model_id = f"{NAME}:{self.model}"
        self._client = httpx.Client(timeout=httpx.Timeout(TIMEOUT_SECONDS, connect=CONNECT_SECONDS))
        try:
            probe = self._request([PROBE_TEXT])
        except ProviderError:
            self._client.close()  # this embedder is never used: free its connection pool
            raise
        self.dim = int(probe.shape[1])
        if self.dim <= 0:
            self._client.close()
            raise ProviderError(f"{self._who()} returned an empty vector")

    # -- helpers ------------------------------------------------------------------------

    def _who(self) -> str:
        return f"embeddings provider {NAME!r} ({self.url}, model {self.model!r})"

    def _key(self) -> str:
        return os.environ.get(self.api_key_env, "") if self.api_key_env else ""

    def _hide_key(self, text: str) -> str:
        """``text`` with the API key blotted out (a server may echo it back)."""
        key = self._key()
        return text.replace(key, "***") if key else text

    def _fail(self, message: str) -> ProviderError:
        return ProviderError(self._hide_key(message))

    def _clip(self, text: str) -> str:
        text = " ".join(text.split())
        return text if len(text) <= EXCERPT else text[:EXCERPT] + "..."

    def _truncate(self, text: str) -> str:
        """Text cut to fit the window, counting about four tokens for three words."""
        spans = word_spans(text)
        most = self.window * 3 // 4
        return text if len(spans) <= most else text[: spans[most - 1][1]]

    # -- requests -----------------------------------------------------------------------

    def _post(self, texts: list[str]) -> Any:
        """The decoded JSON answer to one request."""
        httpx = self._httpx
        headers = {"Content-Type": "application/json"}
        key = self._key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = {"model": self.model, "input": texts}
        try:
            resp = self._client.post(self.url, json=body, headers=headers)
        except httpx.ConnectTimeout:
            raise self._fail(
                f"{self._who()} cannot be reached: no connection within {CONNECT_SECONDS:g} s"
            ) from None
        except httpx.TimeoutException:
            raise self._fail(f"{self._who()} did not answer within {TIMEOUT_SECONDS:g} s") from None
        except httpx.HTTPError as exc:
            raise self._fail(
                f"{self._who()} cannot be reached: {type(exc).__name__}: {exc}"
            ) from None
        if resp.status_code >= 400:
            excerpt = self._clip(resp.text) or "(empty body)"
            hint = ""
            if resp.status_code in (401, 403) and not key:
                hint = (
                    " (no API key was sent: name its variable in [embeddings] api_key_env)"
                    if not self.api_key_env
                    else f" (no API key was sent: ${self.api_key_env} is not set)"
                )
            raise self._fail(f"{self._who()} answered HTTP {resp.status_code}: {excerpt}{hint}")
        try:
            return resp.json()
        except ValueError:
            excerpt = self._clip(resp.text) or "(empty body)"
            raise self._fail(f"{self._who()} answered with something not JSON: {excerpt}") from None

    def _request(self, texts: list[str]) -> Matrix:
        """One batch: an unnormalised float32 row per text, checked against the answer."""
        np = self._np
        answer = self._post(texts)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise self._fail(
                f"{self._who()} answered without a 'data' list: {self._clip(repr(answer))}"
            )
        if len(data) != len(texts):
            raise self._fail(
                f"{self._who()} returned {len(data)} embeddings for {len(texts)} inputs"
            )
        rows: list[Any] = [None] * len(texts)
        for position, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
                raise self._fail(f"{self._who()} answered a row without an 'embedding' list")
            index = item.get("index", position)
            if not isinstance(index, int) or not 0 <= index < len(texts) or rows[index] is not None:
                raise self._fail(f"{self._who()} answered a missing or repeated index {index!r}")
            values = item["embedding"]
            if not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in values
            ):
                raise self._fail(f"{self._who()} answered an embedding with non-numeric values")
            rows[index] = values
        widths = {len(row) for row in rows}
        if len(widths) != 1:
            raise self._fail(
                f"{self._who()} answered embeddings of different sizes: {sorted(widths)}"
            )
        out: Matrix = np.asarray(rows, dtype=np.float32)
        return out

    # -- Embedder -----------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> Matrix:
        np = self._np
        out: Matrix = np.zeros((len(texts), self.dim), dtype=np.float32)
        # A blank text has no meaning to embed (and some servers refuse it): its row stays
        # zero, which scores 0 against every query.
        wanted = [i for i, text in enumerate(texts) if text.strip()]
        for lo in range(0, len(wanted), self.batch_size):
            idx = wanted[lo : lo + self.batch_size]
            rows = self._request([self._truncate(texts[i]) for i in idx])
            if rows.shape[1] != self.dim:
                raise self._fail(
                    f"{self._who()} answered {rows.shape[1]} dimensions, but {self.dim} "
                    "when first asked"
                )
            out[idx] = rows
        return normalise(out)
