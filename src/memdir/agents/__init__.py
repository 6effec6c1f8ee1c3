"""memdir in an agent's loop: the hook handler, the store rule, transcripts read into turns.

- :mod:`memdir.agents.locate`: which store a hook or an import uses;
- :mod:`memdir.agents.transcripts`: Claude Code and Codex transcripts read into turns;
- :mod:`memdir.agents.record`: those turns recorded through :class:`memdir.Memory`, once;
- :mod:`memdir.agents.spool`: the per-session folder (lock, spool) under ``.memdir/hooks/``;
- :mod:`memdir.agents.hooks`: ``memdir hook AGENT EVENT``, the one entry point of every hook.
- :mod:`memdir.agents.imports`: ``memdir import AGENT``, the turns of past sessions;
- :mod:`memdir.agents.wiring`: the hook commands and the MCP server entry an agent runs;
- :mod:`memdir.agents.plugin`: the Claude Code plugin (texts in ``agents/data``);
- :mod:`memdir.agents.install`: ``memdir agent install|uninstall``, the agent's config edited;
- :mod:`memdir.agents.doctor`: ``memdir agent doctor``, the wiring checked by running it.

Importing the package costs nothing: a hook that only appends to its spool (PostToolUse)
imports no more than it needs.
"""

CLAUDE_CODE = "claude-code"
CODEX = "codex"
AGENTS = (CLAUDE_CODE, CODEX)
