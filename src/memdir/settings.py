"""Settings: one frozen value, resolved at each entry point.

Precedence: explicit overrides (flags) > ``MEMDIR_<SECTION>_<KEY>`` environment
variables > ``<root>/.memdir/config.toml`` > defaults. Every field below is a
setting and is documented in ``docs/settings.md`` (a test checks this).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .records import field, fields, recordclass, replace

# Settings are never compared or hashed by value, so no class has eq (the __eq__ and __hash__
# a record would get are never used).


@recordclass(frozen=True, eq=False)
class MemorySettings:
    episodes_path_prefix: str = "episodes/"


@recordclass(frozen=True, eq=False)
class StoreSettings:
    max_file_bytes: int = 32 * 1024 * 1024
    git_commit: bool = True
    durability: str = "full"
    git_batch_seconds: float = 0.0
    lock_timeout_seconds: float = 30.0
    sync_interval_seconds: float = 0.0


@recordclass(frozen=True, eq=False)
class SearchSettings:
    default_limit: int = 10
    mode: str = "auto"
    candidates: int = 50
    rrf_k: int = 10
    bm25_weight: float = 1.0
    vector_weight: float = 1.0
    thread_boost: float = 0.15
    neighbour_boost: float = 0.0
    previous_weight: float = 0.3
    thread_weight: float = 1.0
    date_boost: float = 0.2
    date_scale_days: float = 7.0


@recordclass(frozen=True, eq=False)
class EmbeddingsSettings:
    enabled: bool = True
    inline_limit: int = 2000
    provider: str = "minilm"
    model: str = ""
    batch_size: int = 32
    base_url: str = ""
    api_key_env: str = ""
    tokenizer_path: str = ""
    threads: int = 0
    fast_queries: bool = True
    cache_dir: str = ""
    chunk_tokens: int = 200
    chunk_overlap: int = 40


@recordclass(frozen=True, eq=False)
class RerankSettings:
    provider: str = ""
    depth: int = 20
    base_url: str = ""
    model: str = ""
    api_key_env: str = ""
    timeout_seconds: float = 10.0


@recordclass(frozen=True, eq=False)
class LLMSettings:
    provider: str = ""
    base_url: str = ""
    model: str = ""
    api_key_env: str = ""
    timeout_seconds: float = 30.0


@recordclass(frozen=True, eq=False)
class TurnSettings:
    compactor: str = "default"
    compact_max_chars: int = 1200
    token_counter: str = "auto"
    context_budget: int = 2000
    context_thread_turns: int = 5
    context_user_turns: int = 3
    context_keyword_turns: int = 5
    context_ancestors: int = 8
    context_ancestors_compact: int = 3
    context_ancestor_depth: int = 6
    context_routers: int = 4
    context_item_chars: int = 800


@recordclass(frozen=True, eq=False)
class EngineSettings:
    snapshot_token_cap: int = 1500
    distill_age_days: int = 14
    quarantine_threshold: float = 0.05
    writer: str = "extractive"
    judge: str = "none"  # a route judge that reads each source ("openai": the [llm] endpoint)
    consolidate_turns: bool = False  # fold unmerged turns into thread pages on every run
    # Routing by meaning and its calibration (docs/engine.md, "Routing").
    router: str = "meaning"
    route_margin: float = -0.2
    route_second: float = 0.6
    route_second_words: int = 2  # ... or any share, with this many scope words (0: off)
    route_neighbours: int = 12
    route_scope_weight: float = 10.0
    update_similarity: float = 0.65  # a source this close to an article updates it
    update_claim_similarity: float = 0.55  # a claim this close to one changes its value
    update_cue_similarity: float = 0.45  # ... this close when the sentence says it changed
    answer_floor: float = 0.77  # query: below it, "not found" (docs/engine.md, "query")
    answer_known_miss: float = 0.5  # query: above it, "not found" (docs/engine.md, "query")
    answer_kind: bool = True  # query: "not found" when the best lacks the kind of value asked
    answer_newer_ratio: float = 0.5  # query: a newer answer this relevant goes first
    answer_newer_similarity: float = 0.4  # query: ... when its claim is this close to the best's


@recordclass(frozen=True, eq=False)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 3333
    max_body_bytes: int = 33 * 1024 * 1024
    tokens: tuple[Mapping[str, Any], ...] = ()
    require_auth: bool = False
    sync_interval_seconds: float = 2.0
    git_batch_seconds: float = 0.5
    shutdown_timeout_seconds: float = 30.0
    access_log: bool = True
    watch: bool = True


@recordclass(frozen=True, eq=False)
class SyncSettings:
    remote: str = "origin"
    branch: str = ""  # the branch checked out
    debounce_seconds: float = 5.0
    interval_seconds: float = 60.0


@recordclass(frozen=True, eq=False)
class IndexSettings:
    engine: str = "sqlite"  # or "postgres" (docs/postgres.md)
    dsn: str = ""  # the Postgres connection string (libpq's key=value or a postgresql:// URL)
    store: str = ""  # this store's key in the Postgres index (default: the folder's name)
    connect_timeout_seconds: float = 5.0
    writer: bool = True  # false: a replica that reads the store's rows and never writes them
    # Postgres: a store with this many vectors gets an approximate (HNSW) vector index
    # (0: every vector search scans exactly), and a search through it reads this many
    # nearest chunks (docs/postgres.md, "Vector search").
    approximate_from: int = 20_000
    approximate_candidates: int = 200


@recordclass(frozen=True, eq=False)
class Settings:
    memory: MemorySettings = field(default_factory=MemorySettings)
    store: StoreSettings = field(default_factory=StoreSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    embeddings: EmbeddingsSettings = field(default_factory=EmbeddingsSettings)
    rerank: RerankSettings = field(default_factory=RerankSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    turns: TurnSettings = field(default_factory=TurnSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    sync: SyncSettings = field(default_factory=SyncSettings)
    index: IndexSettings = field(default_factory=IndexSettings)

    def replace(self, **sections: Mapping[str, Any]) -> Settings:
        """A copy with some fields changed: ``s.replace(store={"git_commit": False})``."""
        return _apply(self, sections, source="override")


SECTIONS: tuple[str, ...] = tuple(f.name for f in fields(Settings))
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("store", "durability"): ("full", "rename"),
    # The same names as retrieval.MODES and tokens.COUNTER_NAMES (a test keeps them equal).
    ("search", "mode"): ("auto", "bm25", "vector", "hybrid"),
    ("turns", "token_counter"): ("auto", "tiktoken", "bytes"),
    ("engine", "router"): ("meaning", "nearest", "lexical"),
    ("index", "engine"): ("sqlite", "postgres"),
}


# The least value of a number setting; every other number setting is at least 0.
MINIMUMS: dict[str, float] = {
    "store.max_file_bytes": 1,
    "search.default_limit": 1,
    "search.candidates": 1,
    "index.approximate_candidates": 1,
    "search.rrf_k": 1,
    "search.date_scale_days": 0.001,
    "embeddings.batch_size": 1,
    "embeddings.chunk_tokens": 8,
    "engine.route_margin": -1,  # a share difference: the background may take more
    "engine.route_neighbours": 1,
    "engine.route_scope_weight": 0.1,  # at 0 a walk could never end at a scope
}


# The greatest value of a size setting (content is read into memory whole).
MAXIMUMS: dict[str, float] = {
    "store.max_file_bytes": 2**31 - 1,
    "server.max_body_bytes": 2**31 - 1,
    "engine.route_margin": 1,
    "index.approximate_candidates": 1000,  # pgvector's most (hnsw.ef_search)
}


def _at_least(value: Any, where: str) -> Any:
    key = where.rsplit(": ", 1)[-1]
    least = MINIMUMS.get(key, 0)
    if value < least:
        raise ConfigError(f"{where}: must be at least {least:g}, got {value!r}")
    most = MAXIMUMS.get(key)
    if most is not None and value > most:
        raise ConfigError(f"{where}: must be at most {most:g}, got {value!r}")
    return value


def config_path(root: Path) -> Path:
    return root / ".memdir" / "config.toml"


def _coerce(value: Any, current: Any, where: str) -> Any:
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in {"1", "true", "yes", "on"}:
            return True
        if isinstance(value, str) and value.strip().lower() in {"0", "false", "no", "off"}:
            return False
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if isinstance(current, int):
        # 1e3, true and 2.5 are not integers (int() would take the first two, and cut 2.5).
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected an integer, got {value!r}") from None
        return _at_least(number, where)
    if isinstance(current, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            real = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
        if not math.isfinite(real):
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return _at_least(real, where)
    if isinstance(current, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where}: expected a list")
        return tuple(value)
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _apply(base: Settings, data: Mapping[str, Any], source: str) -> Settings:
    changed: dict[str, Any] = {}
    for section, values in data.items():
        if section not in SECTIONS:
            raise ConfigError(f"{source}: unknown settings section [{section}]")
        if not isinstance(values, Mapping):
            raise ConfigError(f"{source}: [{section}] must be a table")
        current = getattr(base, section)
        names = {f.name for f in fields(current)}
        updates = {}
        for key, value in values.items():
            if key not in names:
                raise ConfigError(f"{source}: unknown setting {section}.{key}")
            updates[key] = _coerce(value, getattr(current, key), f"{source}: {section}.{key}")
            allowed = CHOICES.get((section, key))
            if allowed and updates[key] not in allowed:
                raise ConfigError(
                    f"{source}: {section}.{key} must be one of {', '.join(allowed)}, "
                    f"got {updates[key]!r}"
                )
        changed[section] = replace(current, **updates)
    return replace(base, **changed)


def _from_env(base: Settings, environ: Mapping[str, str]) -> Settings:
    data: dict[str, dict[str, Any]] = {}
    for section in SECTIONS:
        for f in fields(getattr(base, section)):
            name = f"MEMDIR_{section.upper()}_{f.name.upper()}"
            if name in environ and f.name != "tokens":
                data.setdefault(section, {})[f.name] = environ[name]
    return _apply(base, data, source="environment") if data else base


def read_config(root: Path) -> dict[str, Any]:
    """The raw TOML of a store's config ({} when absent)."""
    path = config_path(root)
    if not path.is_file():
        return {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    unset = _sections_only(text)
    if unset is not None:
        return unset
    import tomllib  # a config that sets nothing never needs the parser

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _sections_only(text: str) -> dict[str, Any] | None:
    """The config as TOML reads it when it holds nothing but comments, blank lines and plain
    ``[section]`` headers, each once (the file ``memdir init`` writes, every key commented
    out); None for anything else, which the TOML parser reads. Importing and running it
    cost every hook process about a millisecond."""
    if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text):  # newlines were made "\n" on reading
        return None  # characters TOML refuses, even in a comment
    found: dict[str, Any] = {}
    for line in text.split("\n"):
        bare = line.strip(" \t")
        if not bare or bare.startswith("#"):
            continue
        name = bare[1:-1]
        if not (bare[0] == "[" and bare[-1] == "]" and name.isidentifier() and name.isascii()):
            return None
        if name in found:
            return None  # the parser says why a table cannot be defined twice
        found[name] = {}
    return found


def load(
    root: Path | None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve settings for a store root (or for no store when ``root`` is None)."""
    settings = Settings()
    if root is not None:
        raw = read_config(root)
        raw.pop("harness", None)  # pinned hash, managed by the engine, not a setting
        settings = _apply(settings, raw, source=str(config_path(root)))
    settings = _from_env(settings, os.environ if environ is None else environ)
    if overrides:
        settings = _apply(settings, overrides, source="override")
    return settings


def default_config_toml() -> str:
    """The commented config written by ``memdir init``."""
    lines = ["# memdir settings; see docs/settings.md for every key.", ""]
    for section in SECTIONS:
        lines.append(f"[{section}]")
        for f in fields(getattr(Settings(), section)):
            value = getattr(getattr(Settings(), section), f.name)
            if f.name == "tokens":
                continue
            lines.append(f"# {f.name} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


# ---- the harness pin -------------------------------------------------------------------
# The engine refuses to run once HARNESS.md differs from the hash pinned in the config
# (memdir.engine.harness); a new store is pinned when it is made (memdir.files.store).

# A source string, not a compiled pattern: ``re`` compiles (and caches) it on first use, and
# a hook, which imports this module, never pins a harness.
_HARNESS_TABLE = r"(?ms)^\[harness\][^\n]*\n(?:(?!^\[).*\n?)*"


def harness_digest(text: str) -> str:
    """The pin of a harness: the SHA-256 of HARNESS.md's text."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pinned_harness(root: Path) -> str | None:
    """The pinned hash of HARNESS.md from ``.memdir/config.toml`` (None when not pinned)."""
    return pinned(root, "sha256")


def pinned(root: Path, key: str) -> str | None:
    """A pin of the ``[harness]`` table: ``sha256`` (HARNESS.md) or ``questions``
    (evals/questions.yaml, the evaluation's question set). None when not pinned."""
    table = read_config(root).get("harness")
    value = table.get(key) if isinstance(table, dict) else None
    return value if isinstance(value, str) and value else None


def pin_harness(root: Path, digest: str) -> None:
    """Write ``[harness] sha256 = digest`` into the config (atomic replace)."""
    pin(root, sha256=digest)


def pin(root: Path, **digests: str) -> None:
    """Set pins of the ``[harness]`` table, keeping the others (atomic replace)."""
    path = config_path(root)
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    current = read_config(root).get("harness")
    values = {k: v for k, v in (current or {}).items() if isinstance(v, str) and v}
    values.update(digests)
    table = "[harness]\n" + "".join(f'{k} = "{v}"\n' for k, v in values.items())
    if re.search(_HARNESS_TABLE, text):
        text = re.sub(_HARNESS_TABLE, lambda _m: table, text, count=1)
    else:
        text = text.rstrip("\n") + ("\n\n" if text.strip() else "") + table
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
