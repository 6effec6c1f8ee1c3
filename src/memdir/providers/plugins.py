"""The plugin mechanism (pluggy).

Providers of embedders, rerankers, compactors, article writers and route judges register
through the ``register_*`` hooks. Built-in providers are default plugins; tests register
fakes through the same manager, so there is no test-only branch in the code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

from ..records import recordclass

hookspec = pluggy.HookspecMarker("memdir")
hookimpl = pluggy.HookimplMarker("memdir")


class Specs:
    """Hook specifications. Each hook receives a ``register(name, factory)`` callback."""

    @hookspec
    def register_embedders(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        """Register embedder factories: ``register("name", factory)``."""

    @hookspec
    def register_rerankers(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        """Register reranker factories (see :mod:`memdir.retrieval.rerank`)."""

    @hookspec
    def register_compactors(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        """Register work-log compactor factories."""

    @hookspec
    def register_writers(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        """Register article writer factories."""

    @hookspec
    def register_judges(self, register: Callable[[str, Callable[..., Any]], None]) -> None:
        """Register route judge factories (see :mod:`memdir.engine.judge`)."""


#: Modules of the built-in providers, imported when the manager is first made: named here
#: as strings, so this package imports none of them (they import it to register).
_DEFAULT_PLUGIN_MODULES: list[str] = [
    "memdir.vectors.embedder",
    "memdir.vectors.remote",
    "memdir.retrieval.rerank",
    "memdir.turns.compaction",
    "memdir.engine.writer",
    "memdir.engine.judge",
]
_manager: pluggy.PluginManager | None = None


def add_default_plugin(module: str) -> None:
    """Declare a module of built-in hook implementations (loaded lazily)."""
    if module not in _DEFAULT_PLUGIN_MODULES:
        _DEFAULT_PLUGIN_MODULES.append(module)


def manager() -> pluggy.PluginManager:
    """The process-wide plugin manager, with built-ins and entry points loaded."""
    global _manager
    if _manager is None:
        import importlib

        pm = pluggy.PluginManager("memdir")
        pm.add_hookspecs(Specs)
        for module in _DEFAULT_PLUGIN_MODULES:
            pm.register(importlib.import_module(module), name=module)
        pm.load_setuptools_entrypoints("memdir")
        _manager = pm
    return _manager


def providers(hook: str) -> dict[str, Callable[..., Any]]:
    """All factories registered for ``hook`` ("embedders", "rerankers", "compactors", "writers",
    "judges")."""
    found: dict[str, Callable[..., Any]] = {}

    def register(name: str, factory: Callable[..., Any]) -> None:
        found[name] = factory

    getattr(manager().hook, f"register_{hook}")(register=register)
    return found


@recordclass(frozen=True)
class Kind:
    """One kind of provider: the hook its plugins register through, its name in messages
    and the setting that names the one to use."""

    hook: str
    label: str
    setting: str


KINDS: dict[str, Kind] = {
    "embedder": Kind("embedders", "embeddings provider", "embeddings.provider"),
    "reranker": Kind("rerankers", "rerank provider", "rerank.provider"),
    "compactor": Kind("compactors", "compactor", "turns.compactor"),
    "writer": Kind("writers", "writer", "engine.writer"),
    "judge": Kind("judges", "route judge", "engine.judge"),
}


def factory(kind: str, name: str) -> Callable[..., Any]:
    """The factory registered as ``name`` for ``kind`` ("embedder", "reranker", "compactor",
    "writer", "judge"): the one way memdir looks a provider up.

    A name nothing registered is a :class:`~memdir.errors.ConfigError` naming it, the
    setting and what is registered; never a silent fallback to another provider.
    """
    from ..errors import ConfigError

    spec = KINDS[kind]
    factories = providers(spec.hook)
    if name not in factories:
        known = ", ".join(sorted(factories)) or "none"
        raise ConfigError(f"unknown {spec.label} {name!r} in {spec.setting} (registered: {known})")
    return factories[name]


def build(kind: str, name: str, settings: Any, cls: type[object] | None = None) -> Any:
    """The provider ``name`` of ``kind`` (see :func:`factory`), made from ``settings``.

    With ``cls``, a factory that returns something else is a
    :class:`~memdir.errors.ProviderError`.
    """
    from ..errors import ProviderError

    made = factory(kind, name)(settings)
    if cls is not None and not isinstance(made, cls):
        raise ProviderError(f"{KINDS[kind].label} {name!r} returned no {cls.__name__}")
    return made
