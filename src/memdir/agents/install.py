"""``memdir agent install|uninstall AGENT``: memdir wired into an agent's own config files.

Claude Code: the hooks go into ``settings.json`` (``.claude/settings.json`` of a project, or
``~/.claude/settings.json``), the MCP server into ``.mcp.json`` (project) or ``~/.claude.json``
(user), and the skill and the two commands into ``.claude/skills/memdir/`` and
``.claude/commands/``. Settings, not the plugin: Claude Code loads a plugin only from a
marketplace or from ``--plugin-dir`` on every start, while settings work for every ``claude``
started afterwards, with no flag and no marketplace.

Codex: the hooks go into ``hooks.json`` (``.codex/`` of a project or ``$CODEX_HOME``, default
``~/.codex``) and the MCP server into ``config.toml`` beside it (``[mcp_servers.memdir]``, plus
``[features] codex_hooks = true``, which Codex needs to run hooks), edited with tomlkit so the
user's comments and tables stay as they were.

Every file is edited as data: memdir's entries are added, or taken out, and nothing else is
touched. Uninstall gives back the very bytes that were there before install when the file is
still as install left it: the original bytes are kept in memdir's install record
(``$XDG_STATE_HOME/memdir/installs.json``, default ``~/.local/state/memdir/``). A file edited
since then has only memdir's entries taken out. A file that does not parse is refused and left
as it is. Each write is atomic (a temp file in the same folder, synced, renamed over) and keeps
the file's mode.
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InvalidInput
from ..records import recordclass
from . import CLAUDE_CODE, CODEX
from .plugin import text
from .wiring import SERVER_NAME, hooks_table, is_memdir_hook, mcp_server

Edit = Callable[[bytes | None], bytes | None]


@recordclass(frozen=True)
class Change:
    """One file to change: what it holds now and what it will hold (None: absent)."""

    path: Path
    before: bytes | None
    after: bytes | None

    @property
    def action(self) -> str:
        if self.before is None:
            return "create"
        return "delete" if self.after is None else "modify"

    def diff(self) -> str:
        """A unified diff of the change (for ``--dry-run``)."""
        old = (self.before or b"").decode("utf-8", "replace").splitlines(keepends=True)
        new = (self.after or b"").decode("utf-8", "replace").splitlines(keepends=True)
        name = str(self.path)
        lines = difflib.unified_diff(old, new, fromfile=name, tofile=name)
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


# -- where each agent keeps its config ----------------------------------------------------


def places(agent: str, project: Path | None, env: Mapping[str, str]) -> dict[str, Path]:
    """The files install touches, by role, for a project folder or (None) the user."""
    home = Path(env.get("HOME") or Path.home()).expanduser()
    if agent == CLAUDE_CODE:
        base = project / ".claude" if project is not None else home / ".claude"
        return {
            "settings": base / "settings.json",
            "mcp": project / ".mcp.json" if project is not None else home / ".claude.json",
            "skill": base / "skills" / "memdir" / "SKILL.md",
            "recall": base / "commands" / "memdir-recall.md",
            "consolidate": base / "commands" / "memdir-consolidate.md",
        }
    if agent == CODEX:
        codex_home = env.get("CODEX_HOME", "").strip()
        if project is not None:
            base = project / ".codex"
        else:
            base = Path(codex_home).expanduser() if codex_home else home / ".codex"
        return {"hooks": base / "hooks.json", "config": base / "config.toml"}
    raise InvalidInput(f"unknown agent {agent!r} (known: {CLAUDE_CODE}, {CODEX})")


def state_file(env: Mapping[str, str]) -> Path:
    """memdir's install record: the original bytes of every file install changed."""
    state = env.get("XDG_STATE_HOME", "").strip()
    home = Path(env.get("HOME") or Path.home()).expanduser()
    base = Path(state).expanduser() if state else home / ".local" / "state"
    return base / "memdir" / "installs.json"


# -- JSON files ---------------------------------------------------------------------------


def _indent(data: bytes) -> str | int:
    """The indent a JSON file uses (tab or N spaces), 2 when it shows none."""
    found = re.search(rb"\n([ \t]+)\S", data)
    if not found:
        return 2
    unit = found.group(1)
    return "\t" if unit.startswith(b"\t") else len(unit)


def _load_json(path: Path, data: bytes | None) -> dict[str, Any]:
    if data is None or not data.strip():
        return {}
    try:
        value = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}): fix it first; nothing changed"
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path} does not hold a JSON object: nothing changed")
    return value


def _dump_json(value: dict[str, Any], like: bytes | None) -> bytes:
    indent = _indent(like) if like else 2
    return (json.dumps(value, indent=indent, ensure_ascii=False) + "\n").encode()


def _json_edit(path: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Edit:
    """An edit of a JSON file: ``change`` maps the parsed object to the new one; the bytes
    are left alone when the object is the same."""

    def edit(before: bytes | None) -> bytes | None:
        value = _load_json(path, before)
        new = change(json.loads(json.dumps(value)))
        if new == value:
            return before
        if not new and before is None:
            return None
        return _dump_json(new, before)

    return edit


def _table(value: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    table = value.get(key, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: {key!r} is not an object; nothing changed")
    return table


def strip_hooks(value: dict[str, Any], agent: str, path: Path) -> dict[str, Any]:
    """``value`` without memdir's hook entries (and without what they leave empty)."""
    if "hooks" not in value:
        return value
    hooks = _table(value, "hooks", path)
    kept: dict[str, Any] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            kept[event] = groups
            continue
        new_groups = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list):
                new_groups.append(group)
                continue
            rest = [h for h in inner if not (isinstance(h, dict) and _ours(h, agent))]
            if len(rest) == len(inner):
                new_groups.append(group)
            elif rest:
                new_groups.append({**group, "hooks": rest})
        if new_groups or not groups:
            kept[event] = new_groups
    out = dict(value)
    if kept:
        out["hooks"] = kept
    else:
        del out["hooks"]
    return out


def _ours(entry: dict[str, Any], agent: str) -> bool:
    return is_memdir_hook(entry.get("command"), agent)


def add_hooks(value: dict[str, Any], agent: str, table: dict[str, Any], path: Path) -> Any:
    out = strip_hooks(value, agent, path)
    hooks = dict(_table(out, "hooks", path))
    for event, groups in table.items():
        existing = hooks.get(event, [])
        if not isinstance(existing, list):
            raise ConfigError(f"{path}: hooks.{event} is not a list; nothing changed")
        hooks[event] = [*existing, *groups]
    return {**out, "hooks": hooks}


def strip_server(value: dict[str, Any], path: Path) -> dict[str, Any]:
    servers = _table(value, "mcpServers", path)
    if SERVER_NAME not in servers:
        return value
    rest = {k: v for k, v in servers.items() if k != SERVER_NAME}
    out = dict(value)
    if rest:
        out["mcpServers"] = rest
    else:
        del out["mcpServers"]
    return out


def add_server(value: dict[str, Any], entry: dict[str, Any], path: Path) -> dict[str, Any]:
    servers = dict(_table(value, "mcpServers", path))
    servers[SERVER_NAME] = {"type": "stdio", **entry}
    return {**value, "mcpServers": servers}


# -- config.toml --------------------------------------------------------------------------


def _toml_edit(path: Path, install: dict[str, Any] | None) -> Edit:
    """Codex's config.toml with ``[mcp_servers.memdir]`` set (``install``) or taken out
    (None), comments and the other tables kept as they are."""

    def edit(before: bytes | None) -> bytes | None:
        import tomllib

        import tomlkit
        from tomlkit.exceptions import TOMLKitError

        try:
            source = (before or b"").decode("utf-8")
            tomllib.loads(source)
            doc = tomlkit.parse(source)
        except (tomllib.TOMLDecodeError, TOMLKitError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{path} is not valid TOML ({exc}): fix it first; nothing changed"
            ) from None
        servers = doc.get("mcp_servers")
        if servers is not None and not isinstance(servers, dict):
            raise ConfigError(f"{path}: mcp_servers is not a table; nothing changed")
        if install is None:
            if servers is None or SERVER_NAME not in servers:
                return before
            del servers[SERVER_NAME]
            if not servers:
                del doc["mcp_servers"]
        else:
            if servers is None:
                servers = tomlkit.table(is_super_table=True)
                doc["mcp_servers"] = servers
            entry = tomlkit.table()
            entry["command"] = install["command"]
            entry["args"] = install["args"]
            entry.add(tomlkit.nl())
            if servers.get(SERVER_NAME) == entry:
                current = doc.get("features", {})
                if isinstance(current, dict) and current.get("codex_hooks") is True:
                    return before
            servers[SERVER_NAME] = entry
            features = doc.get("features")
            if features is None:
                features = tomlkit.table()
                doc["features"] = features
            if not isinstance(features, dict):
                raise ConfigError(f"{path}: features is not a table; nothing changed")
            features["codex_hooks"] = True
        result = tomlkit.dumps(doc).encode()
        if before is None and not result.strip():
            return None
        return result

    return edit


# -- plain files (the skill and the commands) ---------------------------------------------


def _file_edit(content: bytes, install: bool) -> Edit:
    def edit(before: bytes | None) -> bytes | None:
        if install:
            return content
        return None if before == content else before  # someone else's file: leave it

    return edit


# -- plans ---------------------------------------------------------------------------------


def edits(
    agent: str,
    install: bool,
    *,
    project: Path | None,
    memdir: list[str],
    root: str | Path | None,
    env: Mapping[str, str],
) -> dict[Path, Edit]:
    """The edit of every file install (or uninstall) touches."""
    where = places(agent, project, env)
    plan: dict[Path, Edit] = {}
    if agent == CLAUDE_CODE:
        table = hooks_table(agent, memdir, root)
        server = mcp_server(memdir, root)
        settings, mcp = where["settings"], where["mcp"]
        if install:
            plan[settings] = _json_edit(settings, lambda v: add_hooks(v, agent, table, settings))
            plan[mcp] = _json_edit(mcp, lambda v: add_server(v, server, mcp))
        else:
            plan[settings] = _json_edit(settings, lambda v: strip_hooks(v, agent, settings))
            plan[mcp] = _json_edit(mcp, lambda v: strip_server(v, mcp))
        for role, name in (
            ("skill", "SKILL.md"),
            ("recall", "recall.md"),
            ("consolidate", "consolidate.md"),
        ):
            plan[where[role]] = _file_edit(text(name), install)
    else:
        table = hooks_table(agent, memdir, root)
        hooks = where["hooks"]
        if install:
            plan[hooks] = _json_edit(hooks, lambda v: add_hooks(v, agent, table, hooks))
        else:
            plan[hooks] = _json_edit(hooks, lambda v: strip_hooks(v, agent, hooks))
        entry = mcp_server(memdir, root) if install else None
        plan[where["config"]] = _toml_edit(where["config"], entry)
    return plan


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a folder, not a file: nothing changed") from None


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def plan(
    agent: str,
    install: bool,
    *,
    project: Path | None = None,
    memdir: list[str],
    root: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> list[Change]:
    """Every change install (``install``) or uninstall would make; nothing is written.

    Raises ConfigError, before anything is written, when a file cannot be edited."""
    env = os.environ if env is None else env
    record = _load_state(env)
    changes = []
    for path, edit in edits(
        agent, install, project=project, memdir=memdir, root=root, env=env
    ).items():
        before = _read(path)
        after = edit(before)
        if not install:
            kept = record.get(str(path.absolute()))
            if kept is not None and kept.get("installed") == _sha(before):
                after = _decode(kept.get("original"))  # as install found it, byte for byte
        if after != before:
            changes.append(Change(path, before, after))
    return changes


def apply(
    changes: list[Change],
    install: bool,
    env: Mapping[str, str] | None = None,
    *,
    forget: list[Path] | None = None,
) -> None:
    """Write the changes (each atomically) and keep the install record in step; an
    uninstall also forgets the files of ``forget`` (every file it looked at)."""
    env = os.environ if env is None else env
    record = _load_state(env)
    folders: list[str] = []
    for change in changes:
        key = str(change.path.absolute())
        if _read(change.path) != change.before:
            raise ConfigError(f"{change.path} changed while memdir was editing it: run again")
        made: list[str] = []
        if change.after is None:
            change.path.unlink()
        else:
            made = _make_parents(change.path.parent)
            write_atomic(change.path, change.after)
        if install:
            kept = record.setdefault(key, {"original": _encode(change.before), "folders": made})
            kept["installed"] = _sha(change.after)
    if not install:
        for path in [c.path for c in changes] + list(forget or ()):
            folders.extend(record.pop(str(path.absolute()), {}).get("folders", []))
        # The folders install created, deepest first, when they are empty again.
        for name in sorted(set(folders), key=len, reverse=True):
            with contextlib.suppress(OSError):
                Path(name).rmdir()
    _save_state(env, record)


def _make_parents(folder: Path) -> list[str]:
    """Create ``folder`` and its missing parents; those created, deepest first."""
    missing = []
    here = folder
    while not here.exists():
        missing.append(str(here.absolute()))
        here = here.parent
    folder.mkdir(parents=True, exist_ok=True)
    return missing


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` so that a crash leaves the old or the new file, keeping its mode.

    A symlink (settings kept in a dotfiles repository) is written through, not replaced."""
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".memdir-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _encode(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _decode(data: object) -> bytes | None:
    return base64.b64decode(data) if isinstance(data, str) else None


def _load_state(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    path = state_file(env)
    try:
        value = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}  # a lost record only means uninstall takes entries out instead
    files = value.get("files") if isinstance(value, dict) else None
    return files if isinstance(files, dict) else {}


def _save_state(env: Mapping[str, str], record: dict[str, dict[str, Any]]) -> None:
    path = state_file(env)
    if not record:
        path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # memdir's own folder, when nothing else is in it
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, (json.dumps({"files": record}, indent=2) + "\n").encode())
