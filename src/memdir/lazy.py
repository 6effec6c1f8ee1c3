"""Modules and loggers loaded on first use, so a command pays only for the verbs it runs.

``memdir memory report`` needs none of the engine's modules, yet the ``Memory``
class that every command opens has the engine verbs as a mixin. The mixin binds
its modules through :func:`module`: the import is prepared at once and runs on
the first attribute access (the standard library's ``importlib.util.LazyLoader``).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import logging


def module(name: str) -> ModuleType:
    """``name``, imported when one of its attributes is first read."""
    found = sys.modules.get(name)
    if found is not None:
        return found
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ImportError(f"no module named {name!r}")
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    lazy = importlib.util.module_from_spec(spec)
    sys.modules[name] = lazy
    loader.exec_module(lazy)
    return lazy


class _Logger:
    """A logger found on its first call: ``logging`` and the handlers it brings cost a hook
    process several milliseconds, and most processes never log."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import logging

        return getattr(logging.getLogger(self._name), attr)


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, imported when the module first logs."""
    return cast("logging.Logger", _Logger(name))
