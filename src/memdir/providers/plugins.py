"""The plugin mechanism (pluggy).

Providers of embedders, rerankers, compactors and article writers register through the
``register_*`` hooks. Built-in providers are default plugins; tests register
fakes through the same manager, so there is no test-only branch in the code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

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


_DEFAULT_PLUGIN_MODULES: list[str] = [
    "memdir.vectors.embedder",
    "memdir.vectors.remote",
    "memdir.retrieval.rerank",
    "memdir.turns.compaction",
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
    """All factories registered for ``hook`` ("embedders", "rerankers", "compactors", "writers")."""
    found: dict[str, Callable[..., Any]] = {}

    def register(name: str, factory: Callable[..., Any]) -> None:
        found[name] = factory

    getattr(manager().hook, f"register_{hook}")(register=register)
    return found


def build(hook: str, name: str, settings: Any, kind: type[object], label: str) -> Any:
    """The provider ``name`` of ``hook``, made from ``settings``; it must be a ``kind``.

    An unknown name is a :class:`~memdir.errors.ConfigError` listing what is registered;
    a factory that returns something else is a :class:`~memdir.errors.ProviderError`.
    ``label`` names the provider kind in messages ("embeddings provider").
    """
    from ..errors import ConfigError, ProviderError

    factories = providers(hook)
    if name not in factories:
        known = ", ".join(sorted(factories)) or "none"
        raise ConfigError(f"unknown {label} {name!r} (registered: {known})")
    made = factories[name](settings)
    if not isinstance(made, kind):
        raise ProviderError(f"{label} {name!r} returned no {kind.__name__}")
    return made
