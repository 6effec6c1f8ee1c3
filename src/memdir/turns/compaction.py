"""Work-log compaction: the ``## Compact`` section of a turn record.

A compactor turns a work log (the tool calls and results of one agent turn) into
a short text. Compactors are plugins (``register_compactors``); a factory takes
the :class:`~memdir.settings.Settings` and returns an object with ``name`` and
``compact(entries, *, input, output, max_chars) -> str``.

Built in:

- ``default``: deterministic and offline. Lists which tools ran with their
  salient arguments, the errors, and the result that mattered (the last
  successful result, or the output when the log has none), within
  ``turns.compact_max_chars``.
- ``llm``: asks any OpenAI-compatible endpoint from ``[llm]`` (``base_url``,
  ``model``, ``api_key_env``) for a summary, through the shared
  :class:`~memdir.providers.openai.OpenAIClient`. httpx is imported lazily.

:func:`compact_worklog` runs the configured compactor; when it fails, the
default is used and the failure is returned in :attr:`Compaction.error`, which
the turn record keeps in its frontmatter (``compact_error``). A compactor name that
nothing registered is a :class:`~memdir.errors.ConfigError`, not a fallback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..errors import ProviderError
from ..providers import plugins
from ..providers.openai import chat_with
from ..providers.plugins import hookimpl
from ..records import recordclass
from ..settings import Settings

Entry = Mapping[str, Any]

# Keys that name the tool, carry its arguments, its result or its error, in the
# shapes agents commonly log (flat records, OpenAI-style tool calls).
_TOOL_KEYS = ("tool", "name", "tool_name", "function")
_ARG_KEYS = ("args", "arguments", "input", "params", "parameters")
_RESULT_KEYS = ("result", "output", "content", "response", "stdout")
_ERROR_KEYS = ("error", "stderr_error", "exception")
_SALIENT = (
    "path",
    "file",
    "filename",
    "query",
    "q",
    "pattern",
    "command",
    "cmd",
    "url",
    "id",
    "name",
    "target",
    "thread",
    "keywords",
)
_ARG_VALUE_CHARS = 60
_TOOL_NAME_CHARS = 60
_MAX_ARGS = 3
# Characters a record cannot hold as they are: control characters other than newline and
# tab (NUL is refused in a markdown file) and lone surrogates (not Unicode). A work log may
# carry them inside JSON strings ("\u0000", "\ud800"); the compact text shows them escaped.
_UNSAFE_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


class Compactor(Protocol):
    name: str

    def compact(self, entries: Sequence[Entry], *, input: str, output: str, max_chars: int) -> str:
        """A short text for ``entries`` no longer than ``max_chars``."""
        ...


@recordclass(frozen=True)
class Compaction:
    """The compact text, which compactor produced it, and a failure if one was replaced."""

    text: str
    compactor: str
    error: str | None = None


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + "…"


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _tool_name(entry: Entry) -> str | None:
    for key in _TOOL_KEYS:
        value = entry.get(key)
        if isinstance(value, Mapping):  # OpenAI: {"function": {"name", "arguments"}}
            value = value.get("name")
        if isinstance(value, str) and value.strip():
            return _clip(value, _TOOL_NAME_CHARS)
    return None


def _arguments(entry: Entry) -> Mapping[str, Any] | str | None:
    sources: list[Any] = [entry.get(k) for k in _ARG_KEYS]
    fn = entry.get("function")
    if isinstance(fn, Mapping):
        sources.append(fn.get("arguments"))
    for raw in sources:
        value = raw
        if isinstance(raw, str):
            try:
                value = json.loads(raw)
            except ValueError:
                return raw
        if isinstance(value, Mapping):
            return value
        if value is not None:
            return _scalar(value)
    return None


def _salient_args(args: Mapping[str, Any] | str | None) -> str:
    if args is None:
        return ""
    if isinstance(args, str):
        return _clip(args, _ARG_VALUE_CHARS)
    keys = [k for k in _SALIENT if k in args]
    keys += sorted(k for k in args if k not in keys and isinstance(args[k], str | int | float))
    parts = []
    for key in keys[:_MAX_ARGS]:
        parts.append(f"{key}={_clip(_scalar(args[key]), _ARG_VALUE_CHARS)}")
    return ", ".join(parts)


def _error(entry: Entry) -> str | None:
    for key in _ERROR_KEYS:
        value = entry.get(key)
        if value:
            return _scalar(value)
    failed = entry.get("is_error") is True or str(entry.get("status", "")).lower() in {
        "error",
        "failed",
        "failure",
    }
    if failed:
        for key in _RESULT_KEYS:
            if entry.get(key):
                return _scalar(entry[key])
        return "failed"
    return None


def _result(entry: Entry) -> str | None:
    for key in _RESULT_KEYS:
        value = entry.get(key)
        if value not in (None, "", [], {}):
            return _scalar(value)
    return None


class DefaultCompactor:
    """Deterministic, offline: tools with salient arguments, errors, the result that mattered."""

    name = "default"

    def compact(self, entries: Sequence[Entry], *, input: str, output: str, max_chars: int) -> str:
        calls: list[str] = []
        errors: list[str] = []
        last_result: str | None = None
        counts: dict[str, int] = {}
        for entry in entries:
            tool = _tool_name(entry)
            err = _error(entry)
            label = tool or "(step)"
            if tool is not None:
                counts[tool] = counts.get(tool, 0) + 1
                args = _salient_args(_arguments(entry))
                calls.append(f"{tool}({args})")
            if err is not None:
                errors.append(f"{label}: {_clip(err, 160)}")
            else:
                result = _result(entry)
                if result is not None:
                    last_result = result
        lines: list[str] = []
        if counts:
            summary = ", ".join(f"{t} x{n}" if n > 1 else t for t, n in counts.items())
            total = sum(counts.values())
            lines.append(f"Tools ({total} call{'' if total == 1 else 's'}): {summary}")
        elif entries:
            # Steps that name no tool (messages, results logged on their own) are work all
            # the same; the note for a turn without any step would hide what they returned.
            count = len(entries)
            lines.append(f"Steps ({count} step{'' if count == 1 else 's'}, no tool named)")
        else:
            lines.append("No tool calls.")
        if errors:
            shown = errors[:3]
            more = f" (+{len(errors) - 3} more)" if len(errors) > 3 else ""
            lines.append(f"Errors ({len(errors)}): " + "; ".join(shown) + more)
        if last_result is not None:
            lines.append("Result: " + _clip(last_result, 300))
        elif output.strip():
            lines.append("Result: " + _clip(output, 300))
        # Calls go last: the first to be cut when the cap is tight.
        head = "\n".join(f"- {line}" for line in lines)
        call_lines: list[str] = []
        used = len(head)
        for i, call in enumerate(calls):
            line = f"  {i + 1}. {call}"
            if used + len(line) + 1 + 40 > max_chars and i < len(calls) - 1:
                call_lines.append(f"  … {len(calls) - i} more calls")
                break
            call_lines.append(line)
            used += len(line) + 1
        text = head
        if call_lines:
            text += "\n- Calls:\n" + "\n".join(call_lines)
        return _fit(text, max_chars)


def _fit(text: str, max_chars: int) -> str:
    """Cut ``text`` to ``max_chars``, at a line end when one is near."""
    if len(text) <= max_chars:
        return text
    if max_chars <= 1:
        return "…"[:max_chars]
    cut = text[: max_chars - 1]
    nl = cut.rfind("\n")
    if nl >= max_chars // 2:
        cut = cut[:nl]
    return cut.rstrip() + "…"


class LLMCompactor:
    """Summarise a work log with any OpenAI-compatible chat completions endpoint."""

    name = "llm"

    def __init__(self, settings: Settings) -> None:
        self.llm = settings.llm

    def compact(self, entries: Sequence[Entry], *, input: str, output: str, max_chars: int) -> str:
        if not self.llm.base_url or not self.llm.model:
            raise ProviderError("llm compactor: [llm] base_url and model are not set")
        log = "\n".join(json.dumps(e, ensure_ascii=False, sort_keys=True) for e in entries)
        prompt = (
            "Summarise this agent turn's work log for later recall. Say which tools ran with "
            "which salient arguments, any errors, and the result that mattered. Plain text, "
            f"at most {max_chars} characters.\n\nInput:\n{input[:4000]}\n\n"
            f"Work log (JSON lines):\n{log[:12000]}\n\nOutput:\n{output[:4000]}"
        )
        text = chat_with(self.llm, "llm compactor", [{"role": "user", "content": prompt}])
        if not text.strip():
            raise ProviderError("llm compactor: empty summary")
        return _fit(text.strip(), max_chars)


def _default_factory(settings: Settings) -> DefaultCompactor:
    return DefaultCompactor()


@hookimpl
def register_compactors(register: Callable[[str, Callable[..., Any]], None]) -> None:
    register("default", _default_factory)
    register("llm", LLMCompactor)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _sanitize(text: str) -> str:
    """Compact text never holds heading lines, so the record's sections stay unambiguous,
    nor a character the record cannot store (shown escaped, as ``\\x00`` or ``\\ud800``)."""
    text = _UNSAFE_RE.sub(_escape, text)
    lines = [("\\" + line) if line.lstrip().startswith("#") else line for line in text.splitlines()]
    return "\n".join(lines).strip()


def compact_worklog(
    entries: Sequence[Entry], *, input: str, output: str, settings: Settings
) -> Compaction:
    """Run the configured compactor; on any failure use the default and record why."""
    name = settings.turns.compactor or "default"
    limit = max(settings.turns.compact_max_chars, 1)
    default = DefaultCompactor()
    error: str | None = None
    if name != "default":
        # An unknown name is a configuration error, raised before anything is written; a
        # compactor that exists but fails falls back to the default below.
        factory = plugins.factory("compactor", name)
        try:
            chosen: Compactor = factory(settings)
            text = _fit(
                _sanitize(chosen.compact(entries, input=input, output=output, max_chars=limit)),
                limit,
            )
            if text:
                return Compaction(text, chosen.name)
            error = f"compactor {name!r} returned nothing"
        except Exception as exc:  # a plugin boundary: any failure falls back
            error = f"{name}: {exc}" if str(exc) else f"{name}: {type(exc).__name__}"
    text = _fit(
        _sanitize(default.compact(entries, input=input, output=output, max_chars=limit)), limit
    )
    return Compaction(text, default.name, _clip(error, 300) if error else None)
