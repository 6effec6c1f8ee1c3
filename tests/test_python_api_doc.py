"""docs/python.md stays true: every public method of Memory is there with its real
signature, and its python examples run.

Convention (stated at the top of docs/python.md): the doc's ```python blocks form one
session, run in order in a fresh empty folder. A block whose first line is a comment
starting with ``# not run:`` is shown only (it needs a server, say); the comment says why.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from memdir.service import Memory

DOC = Path(__file__).resolve().parents[1] / "docs" / "python.md"
NOT_RUN = "# not run:"
BLOCK_RE = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
SIGNATURE_RE = re.compile(r"^`(\w+)\((.*)\) -> (.+?)`", re.MULTILINE)


def public_methods() -> dict[str, Any]:
    """Memory's public callables defined by memdir (classmethods unwrapped), by name."""
    found: dict[str, Any] = {}
    for name in dir(Memory):
        if name.startswith("_"):
            continue
        raw = inspect.getattr_static(Memory, name)
        func = raw.__func__ if isinstance(raw, classmethod | staticmethod) else raw
        if not callable(func):
            continue  # properties such as `root`
        if str(getattr(func, "__module__", "")).startswith("memdir"):
            found[name] = func
    return found


def rendered(func: Any) -> str:
    """``name(params) -> return`` as the doc writes it, from the code's annotations."""
    parts: list[str] = []
    star = False
    for param in list(inspect.signature(func).parameters.values()):
        if param.name in {"self", "cls"}:
            continue
        if param.kind is param.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = param.name
        if param.annotation is not param.empty:
            text += f": {param.annotation}"
        if param.default is not param.empty:
            text += f" = {param.default!r}"
        parts.append(text)
    ret = inspect.signature(func).return_annotation
    return f"{func.__name__}({', '.join(parts)}) -> {ret}"


def documented() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    return {m.group(1): m.group(0).strip("`") for m in SIGNATURE_RE.finditer(text)}


def test_every_public_method_is_documented() -> None:
    methods = public_methods()
    assert {"write", "search", "record_turn", "consolidate", "open"} <= set(methods)
    missing = sorted(set(methods) - set(documented()))
    assert not missing, f"docs/python.md has no signature line for Memory.{missing}"


def test_documented_signatures_match_the_code() -> None:
    methods = public_methods()
    wrong = {
        name: (line, rendered(methods[name]))
        for name, line in documented().items()
        if name in methods and line != rendered(methods[name])
    }
    assert not wrong, "docs/python.md (doc, code): " + "; ".join(
        f"{a!r} != {b!r}" for a, b in wrong.values()
    )


def blocks() -> list[str]:
    return BLOCK_RE.findall(DOC.read_text(encoding="utf-8"))


def test_the_doc_marks_few_blocks_not_run() -> None:
    found = blocks()
    skipped = [b for b in found if b.startswith(NOT_RUN)]
    assert len(found) > 20 and len(skipped) <= 3


def test_the_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MEMDIR_ROOT", raising=False)
    namespace: dict[str, Any] = {"__name__": "python_md"}
    ran = 0
    for number, block in enumerate(blocks(), start=1):
        if block.startswith(NOT_RUN):
            continue
        code = compile(block, f"docs/python.md block {number}", "exec")
        exec(code, namespace)  # a failing example names its block in the traceback
        ran += 1
    assert ran > 20
    assert (tmp_path / "agent-memory" / ".memdir" / "config.toml").is_file()
