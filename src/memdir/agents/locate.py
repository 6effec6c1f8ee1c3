"""Which store an agent hook (or an import) uses.

The rule, first match wins:

1. ``--root`` given to the command;
2. ``MEMDIR_ROOT``;
3. a store found from the project folder (``CLAUDE_PROJECT_DIR``, else the ``cwd`` of the
   hook's event, else the process's folder): that folder or a parent of it that is a store,
   or, on the way up, a store kept inside one of them as ``.memdir-store/``;
4. the user store: ``$XDG_DATA_HOME/memdir`` when ``XDG_DATA_HOME`` is set, else
   ``~/.memdir``; created on first use.

Only step 4 creates anything: a ``--root`` or ``MEMDIR_ROOT`` that is not a store is an error,
as for every other command.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..files.layout import find_root, is_store

PROJECT_STORE = ".memdir-store"
PROJECT_ENV = "CLAUDE_PROJECT_DIR"


def user_store(env: Mapping[str, str] | None = None) -> Path:
    """Where the user store lives (it may not exist yet)."""
    env = os.environ if env is None else env
    data = env.get("XDG_DATA_HOME", "").strip()
    if data:
        return Path(data).expanduser() / "memdir"
    return Path(env.get("HOME") or Path.home()).expanduser() / ".memdir"


def project_dir(cwd: str | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The folder the agent works in: ``CLAUDE_PROJECT_DIR``, the event's ``cwd``, or ours."""
    env = os.environ if env is None else env
    chosen = env.get(PROJECT_ENV) or cwd or os.getcwd()
    return Path(chosen).expanduser()


def project_store(start: Path) -> Path | None:
    """The store of the project folder ``start``, when it or a parent has one (rule 3)."""
    try:
        here = start.resolve()
    except OSError:
        return None
    for folder in (here, *here.parents):
        if is_store(folder):
            return folder
        if is_store(folder / PROJECT_STORE):
            return folder / PROJECT_STORE
    return None


def locate(
    root: str | None = None,
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    create: bool = True,
) -> Path:
    """The store's root by the rule above; the user store is created when missing
    (unless ``create`` is off, then it is returned as it is)."""
    env = os.environ if env is None else env
    explicit = root or env.get("MEMDIR_ROOT") or None
    if explicit:
        return find_root(explicit=explicit)
    found = project_store(project_dir(cwd, env))
    if found is not None:
        return found
    home = user_store(env)
    if create and not is_store(home):
        from ..files.store import Store

        Store.init(home)
    return home.resolve() if home.exists() else home
