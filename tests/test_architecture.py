"""Layering: dependencies point one way (domain <- storage <- service <- adapters)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from memdir.index import passages
from memdir.service import Memory

SRC = Path(__file__).resolve().parents[1] / "src" / "memdir"
# Each pure folder and the top-level modules it may import.
PURE = {"doc": {"errors", "records", "doc"}, "kiwi": {"errors", "records", "doc", "kiwi"}}
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
        assert internal <= {"errors", "records", "providers", "__version__"}, (str(path), internal)


# Words only SQL spells in capitals: statements and clauses, then the smaller words of a
# condition (a fragment naming a table with these is SQL too; prose is lower case).
SQL_CLAUSES = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|FROM|INTO|JOIN|WHERE|MATCH|LIKE)\b"
)
SQL_WORDS = re.compile(r"\b(AND|OR|IN|ON|IS|NOT|NULL|EXISTS|AS|BY)\b")


def index_tables(mem: Memory) -> set[str]:
    """Every table of a real index, the lexical ones of hybrid search included, and every
    table index/ creates under a fixed name (the lazily made ones)."""
    passages.ensure(mem.index)
    rows = mem.index.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    found = {str(r[0]) for r in rows}
    for path in (SRC / "index").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        found.update(
            re.findall(r"CREATE (?:VIRTUAL )?TABLE (?:IF NOT EXISTS )?(\w+)\b(?!\.)", text)
        )
    return found


def code_strings(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of each string a file's code holds (not its docstrings); an f-string
    is one text, each replacement field shown as ``{}``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    skip = set(docstrings)  # and the pieces of f-strings, each seen whole
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            pieces = []
            for value in node.values:
                skip.add(id(value))
                is_text = isinstance(value, ast.Constant) and isinstance(value.value, str)
                pieces.append(value.value if is_text else "{}")
            yield node.lineno, "".join(pieces)
    for node in ast.walk(tree):
        is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
        if is_text and id(node) not in skip:
            yield node.lineno, node.value


def is_sql(text: str, table: re.Pattern[str]) -> bool:
    """Two SQL clauses, or one beside a table name, or a table name in a condition (a lone
    upper-case word such as the HTTP method DELETE is not SQL)."""
    clauses = set(SQL_CLAUSES.findall(text))
    named = table.search(text) is not None
    return len(clauses) >= 2 or (named and (bool(clauses) or bool(SQL_WORDS.search(text))))


def sql_outside_index(tables: set[str]) -> list[str]:
    table = re.compile(r"\b(" + "|".join(sorted(tables)) + r")\b")
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "index":
            continue
        for line, text in code_strings(path):
            if is_sql(text, table):
                found.append(f"{path.relative_to(SRC)}:{line}: {text[:60]}")
    return found


def test_only_the_index_names_a_table(mem: Memory) -> None:
    """Every other package asks index/ (its named functions) for what it needs; no module
    outside index/ runs SQL on the index's tables."""
    tables = index_tables(mem)
    assert {"docs", "docs_fts", "worklogs", "worklog_fts", "turn_edges", "chunks"} <= tables
    assert {"vectors", "embedded", "meta", "passage_links"} <= tables
    assert sql_outside_index(tables) == []
    # The check itself sees the queries where they live.
    table = re.compile(r"\b(" + "|".join(sorted(tables)) + r")\b")
    inside = [t for _, t in code_strings(SRC / "index" / "vectorrows.py") if is_sql(t, table)]
    assert len(inside) > 10


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


MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """A module past this size holds more than one concern: split it by what it owns."""
    long = {
        str(path.relative_to(SRC)): n
        for path in SRC.rglob("*.py")
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}
