"""Layering: dependencies point one way (domain <- storage <- service <- adapters)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from memdir.index import passages
from memdir.service import Memory

SRC = Path(__file__).resolve().parents[1] / "src" / "memdir"
# Each pure folder and the top-level modules it may import.
PURE = {"doc": {"errors", "doc"}, "kiwi": {"errors", "doc", "kiwi"}}
FRAMEWORKS = {"click", "fastapi", "starlette", "uvicorn", "mcp", "httpx", "rich"}
ADAPTERS = {"cli", "http", "mcp"}


def imports_of(path: Path) -> set[str]:
    """Top-level memdir modules and third-party packages imported by a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = path.relative_to(SRC).parts[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                parts = base + (node.module.split(".") if node.module else [])
                if parts:
                    found.add("memdir." + parts[0])
                else:
                    found.update("memdir." + alias.name for alias in node.names)
            elif node.module:
                top = node.module.split(".")
                found.add(".".join(top[:2]) if top[0] == "memdir" else top[0])
    return found


def test_pure_folders_import_no_framework_and_no_storage() -> None:
    for folder, allowed in PURE.items():
        for path in (SRC / folder).rglob("*.py"):
            found = imports_of(path)
            assert not found & FRAMEWORKS, (str(path), found & FRAMEWORKS)
            internal = {m.split(".")[1] for m in found if m.startswith("memdir.")}
            assert internal <= allowed, (str(path), internal - allowed)


def test_adapters_never_import_each_other() -> None:
    for adapter in ADAPTERS:
        folder = SRC / adapter
        if not folder.exists():
            continue
        for path in folder.rglob("*.py"):
            internal = {m.split(".")[1] for m in imports_of(path) if m.startswith("memdir.")}
            others = (ADAPTERS - {adapter}) & internal
            assert not others, (str(path), others)


def test_below_the_adapters_nothing_imports_an_adapter() -> None:
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).parts
        if rel[0] in ADAPTERS or rel[0] in {"__main__.py", "demo.py"}:
            continue
        internal = {m.split(".")[1] for m in imports_of(path) if m.startswith("memdir.")}
        assert not internal & ADAPTERS, (str(path), internal & ADAPTERS)


def _modules_named(path: Path) -> set[str]:
    """Every module a file imports by name, anywhere in it (functions too), as dotted
    paths relative to ``memdir`` ("vectors.remote"); ``from . import x`` counts as ``x``."""
    package = list(path.relative_to(SRC).parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
            elif node.module and node.module.startswith("memdir"):
                base = []
            else:
                continue
            module = (node.module or "").removeprefix("memdir").lstrip(".")
            parts = base + (module.split(".") if module else [])
            found.add(".".join(parts))
            found.update(".".join([*parts, alias.name]) for alias in node.names)
    return found


def test_the_embedders_do_not_import_each_other() -> None:
    # vectors/remote.py builds on vectors/embedder.py and registers itself as a plugin.
    assert "vectors.remote" not in _modules_named(SRC / "vectors" / "embedder.py")
    assert "vectors.embedder" in _modules_named(SRC / "vectors" / "remote.py")


def test_providers_import_none_of_the_concerns_that_register_into_them() -> None:
    # The built-in plugin modules are named as strings and imported by pluggy, so this
    # package sits below vectors/, turns/, retrieval/ and engine/, not beside them.
    for path in (SRC / "providers").rglob("*.py"):
        internal = {m.split(".")[1] for m in imports_of(path) if m.startswith("memdir.")}
        assert internal <= {"errors", "providers", "__version__"}, (str(path), internal)


# SQL as memdir writes it (keywords in upper case): a statement, or a table where SQL names one.
SQL_VERB = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|REPLACE)\b")
SQL_PLACE = r"\b(FROM|INTO|JOIN|UPDATE|TABLE)\s+{table}\b"


def index_tables(mem: Memory) -> set[str]:
    """Every table of a real index, the lexical ones of hybrid search included."""
    passages.ensure(mem.index)
    rows = mem.index.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    return {str(r[0]) for r in rows}


def strings_of(path: Path) -> list[str]:
    """Every string literal of a file, docstrings and the literal parts of f-strings too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def sql_in(path: Path, tables: set[str]) -> list[str]:
    """The strings of a file that hold SQL or name one of these tables."""
    found = []
    for text in strings_of(path):
        named = any(
            f"``{table}``" in text or re.search(SQL_PLACE.format(table=re.escape(table)), text)
            for table in tables
        )
        if named or SQL_VERB.search(text):
            found.append(text)
    return found


def test_only_the_index_names_a_table_of_the_vector_index(mem: Memory) -> None:
    # vectors/ asks index/ (index/vectorrows.py) for its rows; no query lives beside it.
    tables = index_tables(mem)
    assert {"chunks", "vectors", "embedded", "docs", "meta", "passage_links"} <= tables
    found = {
        str(path.relative_to(SRC)): sql_in(path, tables)
        for path in sorted((SRC / "vectors").rglob("*.py"))
    }
    assert {path: texts for path, texts in found.items() if texts} == {}
    # The check itself sees the queries where they now live.
    assert sql_in(SRC / "index" / "vectorrows.py", tables)


TESTS = Path(__file__).resolve().parent


def modules_imported(path: Path) -> set[str]:
    """The top-level names a file imports, at module level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_no_test_module_imports_another_or_conftest() -> None:
    """Shared helpers live in tests/helpers.py; a test module run alone needs no other."""
    tests = {p.stem for p in TESTS.glob("test_*.py")}
    crossed = {
        path.name: sorted(modules_imported(path) & (tests | {"conftest"}))
        for path in sorted(TESTS.glob("*.py"))
    }
    assert {name: found for name, found in crossed.items() if found} == {}


def test_test_files_are_named_after_what_they_test() -> None:
    named_after_a_round = [
        p.name for p in TESTS.glob("*.py") if "review" in p.name or "followup" in p.name
    ]
    assert named_after_a_round == []
