"""The ``openai`` embedder: any server that speaks the OpenAI ``/embeddings`` API.

That covers a local llama.cpp or Ollama server as well as hosted services. It is
configured by ``[embeddings] base_url``, ``model``, ``api_key_env`` and
``batch_size``; texts are sent ``batch_size`` at a time as
``POST {base_url}/embeddings`` with ``{"model", "input"}`` and the rows of the
answer's ``data`` list are put back in order by their ``index``.

The vector dimension is not configured: one request for a one-word text, made
when the embedder is built (only when vectors are needed), finds it. The model id
is ``openai:<model>``, so a store's vectors are never mixed with another model's.
Requests go through :class:`~memdir.providers.openai.OpenAIClient` (httpx, the ``llm``
extra, imported only when this provider is used): its timeouts, retries and errors; the
API key is read from the environment for each request and never appears in an error.

This module registers the provider itself and imports :mod:`.embedder`, never the
reverse, so the two do not import each other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..doc.chunking import word_spans
from ..errors import ProviderError
from ..providers.openai import OpenAIClient, clip, safe_url
from ..providers.plugins import hookimpl
from .embedder import Embedder, _need_numpy, normalise

if TYPE_CHECKING:
    from ..settings import EmbeddingsSettings
    from .embedder import Matrix

NAME = "openai"
#: Seconds to wait for an answer (a local server may load its model on the first request).
TIMEOUT_SECONDS = 60.0
#: The word sent to find the model's dimension.
PROBE_TEXT = "memory"


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
        self.model = settings.model.strip()
        self._client = OpenAIClient(
            settings.base_url,
            who=f"embeddings provider {NAME!r} (model {self.model!r})",
            section="embeddings",
            timeout=TIMEOUT_SECONDS,
            api_key_env=settings.api_key_env,
        )
        self._np = _need_numpy()
        self.url = self._client.url("embeddings")
        self.batch_size = max(1, settings.batch_size)
        self.model_id = f"{NAME}:{self.model}"
        try:
            probe = self._request([PROBE_TEXT])
        except ProviderError:
            self._client.close()  # this embedder is never used: free its connection pool
            raise
        self.dim = int(probe.shape[1])
        if self.dim <= 0:
            self._client.close()
            raise self._fail("returned an empty vector")

    # -- helpers ------------------------------------------------------------------------

    def _fail(self, message: str) -> ProviderError:
        return self._client.fail(f"{self._client.who}: {safe_url(self.url)} {message}")

    def _truncate(self, text: str) -> str:
        """Text cut to fit the window, counting about four tokens for three words."""
        spans = word_spans(text)
        most = self.window * 3 // 4
        return text if len(spans) <= most else text[: spans[most - 1][1]]

    # -- requests -----------------------------------------------------------------------

    def _request(self, texts: list[str]) -> Matrix:
        """One batch: an unnormalised float32 row per text, checked against the answer."""
        np = self._np
        answer = self._client.embeddings(self.model, texts)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise self._fail(f"answered without a 'data' list: {clip(repr(answer))}")
        if len(data) != len(texts):
            raise self._fail(f"returned {len(data)} embeddings for {len(texts)} inputs")
        rows: list[Any] = [None] * len(texts)
        for position, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("embedding"), list):
                raise self._fail("answered a row without an 'embedding' list")
            index = item.get("index", position)
            if not isinstance(index, int) or not 0 <= index < len(texts) or rows[index] is not None:
                raise self._fail(f"answered a missing or repeated index {index!r}")
            values = item["embedding"]
            if not all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                for v in values
            ):
                raise self._fail("answered an embedding with non-numeric values")
            rows[index] = values
        widths = {len(row) for row in rows}
        if len(widths) != 1:
            raise self._fail(f"answered embeddings of different sizes: {sorted(widths)}")
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
                    f"answered {rows.shape[1]} dimensions, but {self.dim} when first asked"
                )
            out[idx] = rows
        return normalise(out)


@hookimpl
def register_embedders(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """The ``openai`` embedder (a server)."""
    register(NAME, OpenAIEmbedder)
