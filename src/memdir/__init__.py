"""memdir: memory for AI agents in a plain folder of markdown files."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import MemdirError

__version__ = "0.1.0"
__all__ = ["Memdir", "MemdirError", "Memory", "Settings", "__version__"]

if TYPE_CHECKING:
    from .service import Memory
    from .settings import Settings

    Memdir = Memory


def __getattr__(name: str) -> Any:
    # The service pulls in SQLite and the store; import it only when asked for.
    if name in {"Memory", "Memdir"}:
        from .service import Memory

        return Memory
    if name == "Settings":  # not at import: a hook that only spools never needs it
        from .settings import Settings

        return Settings
    raise AttributeError(name)
