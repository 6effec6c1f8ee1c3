"""Optional reranking: a model that reads the query and each candidate together.

Fusion ranks candidates from signals computed separately for the query and for each
document. A reranker (a cross-encoder, a hosted rerank service) scores each pair
``(query, candidate text)`` instead, which is slower and usually better at the top of
the list. memdir ships no reranking model (none is available as a package with its
weights; docs/benchmarks.md), so reranking is off unless ``[rerank] provider`` names
one.

Providers register through the ``register_rerankers`` hook (``register(name, factory)``,
``factory(settings: RerankSettings) -> Reranker``). Built in: ``http``, for the rerank
endpoint shape most local and hosted servers share, through the shared client
(:class:`~memdir.providers.openai.OpenAIClient`: its timeout, retries and errors)::

    POST {base_url}/rerank
    {"model": ..., "query": ..., "documents": [...], "top_n": n}
    -> {"results": [{"index": i, "relevance_score": s}, ...]}
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import ProviderError
from ..providers.openai import OpenAIClient
from ..providers.plugins import hookimpl

if TYPE_CHECKING:
    from ..settings import RerankSettings

#: Characters of a candidate sent to the reranker (its title and the start of its text).
TEXT_CHARS = 2000


class Reranker(ABC):
    """Scores candidates for a query; higher is better."""

    @abstractmethod
    def score(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        """One score per text, in the order given."""


class HTTPReranker(Reranker):
    """A ``/rerank`` endpoint (the request and answer shapes in the module docstring)."""

    def __init__(self, settings: RerankSettings) -> None:
        if not settings.base_url or not settings.model:
            raise ProviderError("rerank provider 'http': set [rerank] base_url and model")
        self.settings = settings
        self._client: OpenAIClient | None = None
        self._lock = threading.Lock()

    def client(self) -> OpenAIClient:
        """The shared client, made at the first search (httpx is needed only then)."""
        with self._lock:
            if self._client is None:
                cfg = self.settings
                self._client = OpenAIClient(
                    cfg.base_url,
                    who="rerank provider 'http'",
                    section="rerank",
                    timeout=cfg.timeout_seconds,
                    api_key_env=cfg.api_key_env,
                )
            return self._client

    def score(self, query: str, texts: Sequence[str]) -> Sequence[float]:
        if not texts:
            return []
        answer = self.client().rerank(self.settings.model, query, texts)
        return _scores(answer, len(texts))


def _scores(answer: Any, count: int) -> list[float]:
    """The scores of a ``/rerank`` answer, in the order of the documents sent."""
    try:
        results = answer["results"]
        found: dict[int, float] = {}
        for item in results:
            index = int(item["index"])
            value = item.get("relevance_score", item.get("score"))
            if not 0 <= index < count or index in found or value is None:
                raise ValueError(f"result {item!r}")
            found[index] = float(value)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ProviderError(f"rerank provider 'http': malformed answer ({exc})") from exc
    if len(found) != count:
        raise ProviderError(f"rerank provider 'http': {len(found)} scores for {count} documents")
    return [found[i] for i in range(count)]


@hookimpl
def register_rerankers(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """The built-in reranker."""
    register("http", HTTPReranker)


_cache: dict[tuple[Any, ...], Reranker] = {}
_cache_lock = threading.Lock()


def get_reranker(settings: RerankSettings) -> Reranker | None:
    """The reranker named by ``[rerank] provider``, or None when reranking is off."""
    from ..providers.plugins import build

    name = settings.provider.strip()
    if not name:
        return None
    key = (name, settings.base_url, settings.model, settings.api_key_env, settings.timeout_seconds)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        reranker: Reranker = build("reranker", name, settings, Reranker)
        _cache[key] = reranker
        return reranker


def clear_cache() -> None:
    """Forget loaded rerankers (tests that register new providers call this)."""
    with _cache_lock:
        _cache.clear()


def finite_score(value: Any) -> float:
    """A reranker's score as a float; anything else (text, NaN, infinity) is its failure."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise ProviderError(f"the reranker gave a score that is not a finite number: {value!r}")
    return number
