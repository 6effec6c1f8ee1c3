"""``memdir agent doctor AGENT``: is memdir wired in, and does what the agent will run work?

Each check is one line (``ok`` or ``FAIL`` and what was found): the hooks in the agent's
config, a real SessionStart hook run through the shell as the agent runs it (its answer and
its time), the MCP server started and asked to initialize, and the last lines of the store's
hooks.log.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..records import recordclass
from . import CLAUDE_CODE
from .install import places
from .wiring import SERVER_NAME, is_memdir_hook

_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "memdir-doctor", "version": "1"},
    },
}


@recordclass(frozen=True)
class Check:
    ok: bool
    what: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.what}"


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def find_hook(agent: str, path: Path, event: str) -> str | None:
    """memdir's hook command for ``event`` in a settings or hooks.json file."""
    groups = _json(path).get("hooks", {}).get(event, [])
    for group in groups if isinstance(groups, list) else []:
        for entry in group.get("hooks", []) if isinstance(group, dict) else []:
            if isinstance(entry, dict) and is_memdir_hook(entry.get("command"), agent):
                return str(entry["command"])
    return None


def find_server(agent: str, where: dict[str, Path]) -> dict[str, Any] | None:
    """memdir's MCP server entry in the agent's config."""
    if agent == CLAUDE_CODE:
        servers = _json(where["mcp"]).get("mcpServers", {})
    else:
        try:
            servers = tomllib.loads(where["config"].read_text("utf-8")).get("mcp_servers", {})
        except (OSError, ValueError):
            servers = {}
    entry = servers.get(SERVER_NAME) if isinstance(servers, dict) else None
    return entry if isinstance(entry, dict) else None


def diagnose(agent: str, project: Path | None, env: Mapping[str, str] | None = None) -> list[Check]:
    """Every check, in order (a failed one does not stop the others)."""
    env = dict(os.environ if env is None else env)
    where = places(agent, project, env)
    config = where["settings"] if agent == CLAUDE_CODE else where["hooks"]
    checks: list[Check] = []
    command = find_hook(agent, config, "SessionStart")
    if command is None:
        checks.append(Check(False, f"no memdir hooks in {config}: run memdir agent install"))
    else:
        checks.append(Check(True, f"hooks in {config}"))
        checks.append(_run_hook(command, project, env))
    server = find_server(agent, where)
    if server is None:
        config = where["mcp"] if agent == CLAUDE_CODE else where["config"]
        checks.append(Check(False, f"no memdir MCP server in {config}"))
    else:
        checks.append(_run_server(server, project, env))
    store = _store_of(command, project, env)
    if store is not None:
        checks.append(_hooks_log(store))
    return checks


def _run_hook(command: str, project: Path | None, env: dict[str, str]) -> Check:
    cwd = project or Path.cwd()
    payload = {"session_id": f"memdir-doctor-{os.getpid()}", "source": "startup", "cwd": str(cwd)}
    payload["hook_event_name"] = "SessionStart"
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            shell=True,
            input=json.dumps(payload).encode(),
            capture_output=True,
            env=env,
            cwd=cwd,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Check(False, f"the SessionStart hook took over 60 s: {command}")
    ms = (time.monotonic() - started) * 1000
    try:
        answer = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    except (ValueError, KeyError, TypeError):
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[:200]
        why = said or "nothing on stdout (see hooks.log)"
        return Check(False, f"the SessionStart hook (exit {done.returncode}) answered: {why}")
    return Check(True, f"the SessionStart hook answered {len(answer)} characters in {ms:.0f} ms")


def _run_server(server: dict[str, Any], project: Path | None, env: dict[str, str]) -> Check:
    argv = [str(server.get("command", "")), *[str(a) for a in server.get("args", [])]]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=project or Path.cwd(),
        )
    except OSError as exc:
        return Check(False, f"the MCP server does not start ({shlex.join(argv)}): {exc}")
    try:
        out, err = proc.communicate((json.dumps(_INITIALIZE) + "\n").encode(), timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    ms = (time.monotonic() - started) * 1000
    for line in out.splitlines():
        try:
            reply = json.loads(line)
        except ValueError:
            continue
        if isinstance(reply, dict) and reply.get("id") == 1 and "result" in reply:
            name = reply["result"].get("serverInfo", {}).get("name", "?")
            return Check(True, f"the MCP server {name!r} initialized in {ms:.0f} ms")
    said = err.decode(errors="replace").strip().splitlines()[-1:] or ["no answer"]
    return Check(False, f"the MCP server did not initialize ({shlex.join(argv)}): {said[0]}")


def _store_of(command: str | None, project: Path | None, env: dict[str, str]) -> Path | None:
    from .locate import locate

    words = shlex.split(command) if command else []
    root = words[words.index("--root") + 1] if "--root" in words[:-1] else None
    try:
        return locate(root, cwd=str(project) if project else None, env=env, create=False)
    except Exception:
        return None


def _hooks_log(store: Path) -> Check:
    log = store / ".memdir" / "hooks.log"
    try:
        lines = log.read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return Check(True, f"store {store}: no hooks.log (no hook has failed there)")
    errors = [line for line in lines if "error:" in line]
    if not errors:
        return Check(True, f"store {store}: hooks.log has {len(lines)} lines, no error")
    return Check(True, f"store {store}: last hook error in {log}: {errors[-1][:300]}")
