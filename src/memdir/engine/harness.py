"""HARNESS.md: the frozen contracts (article schema, citations, defects, hard rules).

The file uses the section grammar of :mod:`memdir.engine.program`. :func:`parse` reads it into a
:class:`Harness`; :func:`validate_article` checks one article against it (used by ``refine``
for schema violations and by ``consolidate --apply`` before filing). The file's SHA-256 is
pinned in ``.memdir/config.toml`` under ``[harness] sha256``; :func:`check` raises
:class:`~memdir.errors.HarnessChanged` when the file no longer matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..doc.text import read_utf8
from ..errors import ConfigError, HarnessChanged
from ..records import recordclass
from ..settings import harness_digest, pin, pin_harness, pinned, pinned_harness
from .program import data_items, split_sections

# Defects the engine knows how to count; the harness chooses which of them are drift.
KNOWN_DEFECTS = (
    "orphan",
    "index_mismatch",
    "broken_link",
    "cross_bundle_wikilink",
    "schema_violation",
    "episode_integrity",
)

FOOTNOTE_REF = re.compile(r"\[\^([^\]\s]+)\](?!:)")
FOOTNOTE_DEF = re.compile(r"^\[\^([^\]\s]+)\]:\s*(.*)$", re.MULTILINE)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.*)$")


@recordclass(frozen=True)
class Harness:
    article_type: str
    required_keys: tuple[str, ...]
    required_sections: tuple[str, ...]
    cited_sections: tuple[str, ...]
    status_values: tuple[str, ...]
    description_max_chars: int
    title_max_chars: int
    defects: Mapping[str, str]
    rules: tuple[str, ...]
    sha256: str


def _csv(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def parse(text: str, source: str = "HARNESS.md") -> Harness:
    """Parse HARNESS.md; ConfigError names the line when it does not fit the grammar."""
    sections = split_sections(text, source, ConfigError)
    for needed in ("article schema", "defects"):
        if needed not in sections:
            raise ConfigError(f"{source}: missing section '## {needed.capitalize()}'")
    schema: dict[str, str] = {}
    schema_lines: dict[str, int] = {}
    known = {
        "type",
        "required_keys",
        "required_sections",
        "cited_sections",
        "status_values",
        "description_max_chars",
        "title_max_chars",
    }
    for item in data_items(sections["article schema"], source, ConfigError):
        if item.key not in known:
            raise ConfigError(f"{source}:{item.line}: unknown article schema key '{item.key}'")
        schema[item.key] = item.value
        schema_lines[item.key] = item.line

    def integer(key: str, default: int) -> int:
        if key not in schema:
            return default
        try:
            return int(schema[key])
        except ValueError:
            raise ConfigError(f"{source}:{schema_lines[key]}: '{key}' must be an integer") from None

    defects: dict[str, str] = {}
    for item in data_items(sections["defects"], source, ConfigError):
        if item.key not in KNOWN_DEFECTS:
            raise ConfigError(
                f"{source}:{item.line}: unknown defect '{item.key}' "
                f"(known: {', '.join(KNOWN_DEFECTS)})"
            )
        defects[item.key] = item.value
    if "citations" in sections:
        data_items(sections["citations"], source, ConfigError)  # validates the grammar
    rules: list[str] = []
    if "hard rules" in sections:
        for _, line in sections["hard rules"].lines:
            m = _LIST_ITEM.match(line)
            if m:
                rules.append(m.group(1).strip())
    required_keys = _csv(schema.get("required_keys", "type"))
    if "type" not in required_keys:
        required_keys = ("type", *required_keys)
    return Harness(
        article_type=schema.get("type", "concept") or "concept",
        required_keys=required_keys,
        required_sections=_csv(schema.get("required_sections", "")),
        cited_sections=_csv(schema.get("cited_sections", "")),
        status_values=_csv(schema.get("status_values", "draft, stable, deprecated")),
        description_max_chars=integer("description_max_chars", 280),
        title_max_chars=integer("title_max_chars", 120),
        defects=defects,
        rules=tuple(rules),
        sha256=harness_digest(text),
    )


# ---- article validation ------------------------------------------------------------------


def body_sections(body: str) -> dict[str, str]:
    """``## Heading`` -> text, lowercased headings, fenced code respected."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    fenced = False
    for line in body.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            current = line[3:].strip().lower()
            out.setdefault(current, [])
        elif current is not None:
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def claims(section_text: str) -> list[str]:
    """List items of a section (continuation lines joined)."""
    items: list[str] = []
    for line in section_text.splitlines():
        m = _LIST_ITEM.match(line)
        if m:
            items.append(m.group(1).strip())
        elif items and line.startswith((" ", "\t")) and line.strip():
            items[-1] += " " + line.strip()
    return items


def _nonblank(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, str | list | dict | tuple):
        return len(value) > 0 and (not isinstance(value, str) or bool(value.strip()))
    return True


def _stamp_ok(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("by"), str)
        and bool(value["by"].strip())
        and isinstance(value.get("at"), str)
        and bool(value["at"].strip())
    )


def validate_article(
    harness: Harness, fm: Mapping[str, Any], body: str, *, fm_error: str | None = None
) -> list[str]:
    """Every way the article breaks the harness (empty when it conforms)."""
    problems: list[str] = []
    if fm_error:
        return [f"invalid frontmatter: {fm_error}"]
    for key in harness.required_keys:
        if not _nonblank(fm.get(key)):
            problems.append(f"missing required key '{key}'")
    kind = fm.get("type")
    if _nonblank(kind) and not isinstance(kind, str):
        problems.append("'type' must be a string")
    title = fm.get("title")
    if isinstance(title, str) and len(title) > harness.title_max_chars:
        problems.append(f"title longer than {harness.title_max_chars} characters")
    description = fm.get("description")
    if description is not None and not isinstance(description, str):
        problems.append("'description' must be a string")
    elif isinstance(description, str) and len(description) > harness.description_max_chars:
        problems.append(f"description longer than {harness.description_max_chars} characters")
    status = fm.get("status")
    if status is not None and status not in harness.status_values:
        problems.append(f"status {status!r} is not one of {', '.join(harness.status_values)}")
    if "generated" in fm and not _stamp_ok(fm["generated"]):
        problems.append("'generated' must be a mapping with non-empty 'by' and 'at'")
    if "verified" in fm and not (isinstance(fm["verified"], bool) or _stamp_ok(fm["verified"])):
        problems.append("'verified' must be true/false or a mapping with 'by' and 'at'")
    related = fm.get("related")
    if related is not None and not (
        isinstance(related, list) and all(isinstance(r, str) for r in related)
    ):
        problems.append("'related' must be a list of paths")
    source_ids: set[str] = set()
    sources = fm.get("sources")
    if sources is not None:
        if not isinstance(sources, list):
            problems.append("'sources' must be a list of {id, resource}")
        else:
            for n, src in enumerate(sources, start=1):
                if not (
                    isinstance(src, Mapping)
                    and isinstance(src.get("id"), str)
                    and src["id"].strip()
                    and isinstance(src.get("resource"), str)
                    and src["resource"].strip()
                ):
                    problems.append(f"sources item {n} needs non-empty string 'id' and 'resource'")
                    continue
                if src["id"] in source_ids:
                    problems.append(f"source id '{src['id']}' repeats")
                source_ids.add(src["id"])
    sections = body_sections(body)
    for name in harness.required_sections:
        if name.lower() not in sections:
            problems.append(f"missing section '## {name}'")
    for name in harness.cited_sections:
        for claim in claims(sections.get(name.lower(), "")):
            if not FOOTNOTE_REF.search(claim):
                problems.append(f"uncited claim in '## {name}': {claim[:60]!r}")
    defined = {m.group(1) for m in FOOTNOTE_DEF.finditer(body)}
    for ref in sorted({m.group(1) for m in FOOTNOTE_REF.finditer(body)}):
        if ref not in source_ids:
            problems.append(f"citation [^{ref}] matches no sources[].id")
        elif ref not in defined:
            problems.append(f"citation [^{ref}] has no footnote definition")
    return problems


def load(root: Path) -> Harness:
    path = root / "HARNESS.md"
    if not path.is_file():
        raise ConfigError(f"{path} is missing; restore it or run `memdir init --force`")
    return parse(read_utf8(path), source=str(path.name))


def check(root: Path) -> Harness:
    """Load the harness; raise HarnessChanged when it differs from the pinned hash.

    A store without a pin (made before the engine existed) is pinned on first use.
    """
    harness = load(root)
    expected = pinned_harness(root)
    if expected is None:
        pin_harness(root, harness.sha256)
    elif expected != harness.sha256:
        # Names the engine verbs that call check(); the store's writes (write, merge, turn
        # record, forget) never read the harness.
        raise HarnessChanged(
            "HARNESS.md changed since it was pinned "
            f"(pinned {expected[:12]}, now {harness.sha256[:12]}); ingest, consolidate, bundle "
            "add, bundle remove, episode add, reflect, refine, evaluate and query refuse "
            "until `memdir harness accept`"
        )
    return harness


# -- the rest of the yardstick: the question set and what each run judged against ---------

QUESTIONS = "evals/questions.yaml"


def questions_digest(root: Path) -> str | None:
    """The SHA-256 of evals/questions.yaml's text (None when there is no such file)."""
    path = root / QUESTIONS
    return harness_digest(read_utf8(path)) if path.is_file() else None


def check_questions(root: Path) -> str | None:
    """The question set's digest; raise HarnessChanged when it differs from its pin.

    As for HARNESS.md, a store with no pin is pinned on first use (the first evaluate), so
    scores are always compared over the same questions; ``memdir harness accept`` pins a
    changed set (the next evaluate is then a new baseline).
    """
    digest = questions_digest(root)
    if digest is None:
        return None
    expected = pinned(root, "questions")
    if expected is None:
        pin(root, questions=digest)
    elif expected != digest:
        raise HarnessChanged(
            f"{QUESTIONS} changed since it was pinned (pinned {expected[:12]}, now "
            f"{digest[:12]}): scores over other questions are not comparable; evaluate refuses "
            "until `memdir harness accept`"
        )
    return digest


def yardstick(root: Path) -> dict[str, str]:
    """Short hashes of what a run judged against, for its row in runs.tsv."""
    program = root / "PROGRAM.md"
    questions = questions_digest(root)
    return {
        "harness_sha": load(root).sha256[:12],
        "program_sha": harness_digest(read_utf8(program))[:12] if program.is_file() else "-",
        "questions_sha": questions[:12] if questions else "-",
    }
