"""Errors of the core, as every surface shows them: no CLI flag in a message HTTP and MCP
callers read, and a caller's mistake is the caller's input."""

from __future__ import annotations

import pytest

from memdir.service import Memory


def test_core_errors_do_not_name_cli_flags(kitchen: Memory) -> None:
    """HTTP and MCP callers see these messages too."""
    from memdir.errors import InvalidInput, UnsafePath

    with pytest.raises(InvalidInput) as merge:
        kitchen.merge("wiki/page.md")
    with pytest.raises(InvalidInput) as walk:
        kitchen.ancestors("nope")
    with pytest.raises(UnsafePath) as dots:
        kitchen.write("wiki/../wiki/x.md", "# X\n")
    for raised in (merge, walk, dots):
        assert "--" not in str(raised.value)
    assert "26-character" in str(walk.value)
    assert "'..'" in str(dots.value)


def test_open_refuses_settings_and_overrides_together(kitchen: Memory) -> None:
    from memdir.errors import InvalidInput

    with pytest.raises(InvalidInput, match="not both"):
        Memory.open(kitchen.root, settings=kitchen.settings, overrides={"search": {"rrf_k": 5}})
    with Memory.open(kitchen.root, settings=kitchen.settings) as again:
        assert again.settings is kitchen.settings
